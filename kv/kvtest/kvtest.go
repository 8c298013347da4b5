// Package kvtest gives tests a real embedded etcd server in a temporary
// directory, stopped when the test ends.
package kvtest

import (
	"testing"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/kv"
)

// New starts an embedded etcd for t and returns a connected store.
func New(t testing.TB) *kv.Store {
	t.Helper()
	s, err := kv.Open(testenv.Context(t), kv.Config{DataDir: t.TempDir()}, testenv.Logger(t))
	if err != nil {
		t.Fatalf("kvtest: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
