package agent

import (
	"net/netip"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
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
	testutil.WaitFor(t, wait, "generation 1 applied and reported", func() bool {
		_, _, ok := getStatus(t, s.Client, "host-a")
		return ok && rec.last() == 1
	})
	stop()
	goleak.VerifyNone(t, existing)
}

// With a lease shared by many agents, an agent writes under it and deletes
// its status when it stops, leaving the lease to its owner.
func TestSharedLease(t *testing.T) {
	s := kvtest.New(t)
	ctx := testenv.Context(t)
	lease, err := s.Client.Grant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	putDoc(t, s.Client, doc("host-a", 1))
	putGen(t, s.Client, 1)
	rec := &recorder{}
	stop := start(t, newAgent(t, Config{Endpoint: "host-a", Client: s.Client, Planes: 4, Lease: lease.ID}, rec))
	testutil.WaitFor(t, wait, "the status under the shared lease", func() bool {
		st, l, ok := getStatus(t, s.Client, "host-a")
		return ok && st.AppliedGeneration == 1 && l == int64(lease.ID)
	})
	stop()
	if _, _, ok := getStatus(t, s.Client, "host-a"); ok {
		t.Fatal("status left after the agent stopped")
	}
	ttl, err := s.Client.TimeToLive(ctx, lease.ID)
	if err != nil || ttl.TTL <= 0 {
		t.Fatalf("shared lease gone after one agent stopped: %v %+v", err, ttl)
	}
}

// A document whose addresses are not this host's is applied (its steering
// holds) and the mismatch is reported.
func TestAddressMismatchIsReported(t *testing.T) {
	s := kvtest.New(t)
	local := []netip.Addr{netip.MustParseAddr("10.77.0.1"), netip.MustParseAddr("10.77.1.1"), netip.MustParseAddr("10.77.2.9"), netip.MustParseAddr("10.77.3.1")}
	rec := &recorder{}
	a := newAgent(t, Config{Endpoint: "host-a", Client: s.Client, Addresses: local}, rec)
	if a.planes != 4 {
		t.Fatalf("planes %d, want 4 from the addresses", a.planes)
	}
	putDoc(t, s.Client, doc("host-a", 1))
	putGen(t, s.Client, 1)
	start(t, a)
	testutil.WaitFor(t, wait, "generation 1 applied with the mismatch reported", func() bool {
		st := a.Status()
		return rec.last() == 1 && len(st.Errors) == 1 && strings.Contains(st.Errors[0], "plane p2: document 10.77.2.1, local 10.77.2.9")
	})
}
