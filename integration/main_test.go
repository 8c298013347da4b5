package integration

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/store/storetest"
)

func TestMain(m *testing.M) {
	// glog (through the gNMI packages) starts a flush daemon at init.
	storetest.Main(m, goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"))
}

// fabricdBin builds fabricd once per test binary.
func fabricdBin(t *testing.T) string { return testutil.FabricdBin(t) }

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
