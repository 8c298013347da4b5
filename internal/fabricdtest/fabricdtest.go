// Package fabricdtest runs the real fabricd binary for a test: built once
// per test binary, with its private PostgreSQL and embedded etcd in a data
// directory of the test's, stopped when the test ends.
//
//	p := fabricdtest.Start(t, "--topology", fabricdtest.ExampleTopology(t))
//	err := p.GetJSON(ctx, "/api/v1/planes", &planes)
package fabricdtest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/multiplane/multiplane/internal/fabricdproc"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/store/pgcluster"
)

// Start starts fabricd with args (and --log-level warn) and waits until it
// is ready; it needs the machine's PostgreSQL binaries.
func Start(t testing.TB, args ...string) *fabricdproc.Proc {
	t.Helper()
	_, err := pgcluster.FindBinDir()
	testenv.Require(t, err == nil, "needs PostgreSQL server binaries (Debian package postgresql)")
	dir, err := os.MkdirTemp("", "mp-fabricd-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755) // the postgres user reaches it when root
	t.Cleanup(func() { os.RemoveAll(dir) })
	p, err := fabricdproc.Start(testenv.Context(t), fabricdproc.Options{Bin: testutil.FabricdBin(t), DataDir: dir,
		Args: append([]string{"--log-level", "warn"}, args...)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// ExampleTopology is the path of examples/topology.yaml.
func ExampleTopology(t testing.TB) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("fabricdtest: no source path")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "examples", "topology.yaml")
}
