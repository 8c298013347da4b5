package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var fabricd struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// FabricdBin builds the fabricd binary once per test process (into a
// temporary directory under TMPDIR) and returns its path, for tests that
// run the real binary.
func FabricdBin(t testing.TB) string {
	t.Helper()
	fabricd.once.Do(func() {
		dir, err := os.MkdirTemp("", "mp-fabricd-bin-")
		if err != nil {
			fabricd.err = err
			return
		}
		fabricd.path = filepath.Join(dir, "fabricd")
		fabricd.out, fabricd.err = exec.Command("go", "build", "-o", fabricd.path, "github.com/multiplane/multiplane/cmd/fabricd").CombinedOutput()
	})
	if fabricd.err != nil {
		t.Fatalf("build fabricd: %v\n%s", fabricd.err, fabricd.out)
	}
	return fabricd.path
}
