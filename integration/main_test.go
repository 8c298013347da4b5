package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/multiplane/multiplane/store/storetest"
)

func TestMain(m *testing.M) {
	// glog (through the gNMI packages) starts a flush daemon at init.
	storetest.Main(m, goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"))
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
	buildOut  []byte
)

// fabricdBin builds fabricd once per test binary.
func fabricdBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "mp-integration-bin-")
		if buildErr == nil {
			buildOut, buildErr = exec.Command("go", "build", "-o", binDir+"/", "../cmd/fabricd").CombinedOutput()
		}
	})
	if buildErr != nil {
		t.Fatalf("build fabricd: %v\n%s", buildErr, buildOut)
	}
	return filepath.Join(binDir, "fabricd")
}

// dataDir makes a directory the postgres user could reach when root.
func dataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mp-integration-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
