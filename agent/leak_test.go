package agent

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/multiplane/multiplane/kv/kvtest"
)

// An agent with its own etcd client leaves no goroutine behind when it
// stops (etcd's own, started before, are ignored).
func TestNoGoroutineLeft(t *testing.T) {
	s := kvtest.New(t)
	putDoc(t, s.Client, doc("host-a", 1))
	putGen(t, s.Client, 1)
	existing := goleak.IgnoreCurrent()

	rec := &recorder{}
	a := newAgent(t, Config{Endpoint: "host-a", EtcdEndpoints: s.Endpoints(), StateDir: t.TempDir(), Planes: 4}, rec)
	stop := start(t, a)
	waitFor(t, wait, "generation 1 applied and reported", func() bool {
		_, _, ok := getStatus(t, s.Client, "host-a")
		return ok && rec.last() == 1
	})
	stop()
	goleak.VerifyNone(t, existing)
}
