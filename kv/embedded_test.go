package kv

import (
	"testing"
	"time"

	"github.com/multiplane/multiplane/internal/testenv"
)

// TestEmbeddedFailedWhenServerStopsOnItsOwn: a server that stops without
// Close (a fatal error inside etcd) closes Failed; Close does not.
func TestEmbeddedFailedWhenServerStopsOnItsOwn(t *testing.T) {
	for _, tc := range []struct {
		name     string
		byItself bool
	}{{"close", false}, {"server stops by itself", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := StartEmbedded(testenv.Context(t), t.TempDir(), EmbeddedOptions{}, testenv.Logger(t))
			if err != nil {
				t.Fatal(err)
			}
			if tc.byItself {
				e.etcd.Server.HardStop()
				select {
				case <-e.Failed():
				case <-time.After(10 * time.Second):
					t.Fatal("Failed not closed 10s after the server stopped")
				}
				if e.Err() == nil {
					t.Error("Err() = nil after a failure")
				}
				e.Close()
				return
			}
			e.Close()
			select {
			case <-e.Failed():
				t.Fatalf("Failed closed by Close: %v", e.Err())
			default:
			}
		})
	}
}
