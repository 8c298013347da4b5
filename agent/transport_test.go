package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/fabricsim/userspace"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/kv/kvtest"
	"github.com/multiplane/multiplane/transport"
)

func listenTransport(t *testing.T, planes int) *transport.Transport {
	t.Helper()
	local := make([]netip.AddrPort, planes)
	for i := range local {
		local[i] = netip.MustParseAddrPort("127.0.0.1:0")
	}
	tr, err := transport.Listen(transport.Config{Local: local, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// dialPair connects a to b and returns a's side.
func dialPair(t *testing.T, ctx context.Context, a, b *transport.Transport) *transport.Conn {
	t.Helper()
	accepted := make(chan error, 1)
	go func() {
		c, err := b.Accept(ctx)
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		accepted <- err
	}()
	c, err := a.Dial(ctx, b.LocalAddrs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	return c
}

// activePlanes lists the planes with active paths and their path counts.
func activePlanes(c *transport.Conn) map[int]int {
	out := map[int]int{}
	for _, p := range c.Stats().Paths {
		if p.Active {
			out[p.Plane]++
		}
	}
	return out
}

// The agent drives a running transport from etcd: a published document
// becomes the live connection's path set.
func TestTransportApplierFromEtcd(t *testing.T) {
	ctx := testenv.Context(t)
	s := kvtest.New(t)
	a, b := listenTransport(t, 4), listenTransport(t, 4)
	conn := dialPair(t, ctx, a, b)
	ap := NewTransportApplier(a)

	ag := newAgent(t, Config{Endpoint: "host-a", Client: s.Client}, ap) // planes from the transport
	if ag.planes != 4 {
		t.Fatalf("agent validates against %d planes, want the transport's 4", ag.planes)
	}
	d := doc("host-a", 3)
	d.Entropy = 2
	planes := healthy(4)
	planes[1].State, planes[1].CapacityRatio = "down", 0 // from the generation document, not the endpoint's
	putDoc(t, s.Client, d)
	putGenDoc(t, s.Client, contract.GenerationDoc{Generation: 3, PlanesGeneration: 3, Planes: planes})
	start(t, ag)
	testutil.WaitFor(t, wait, "the connection on generation 3", func() bool { return conn.Stats().PathSetGeneration == 3 })
	// The transport takes the path set before the agent records it: the
	// status names planes from the applied document only then.
	testutil.WaitFor(t, wait, "generation 3 applied", func() bool { return ag.Status().AppliedGeneration == 3 })
	if got := activePlanes(conn); len(got) != 3 || got[0] != 2 || got[2] != 2 || got[3] != 2 {
		t.Fatalf("active paths per plane %v, want 2 on each of planes 0, 2, 3", got)
	}
	st := ag.Status()
	if len(st.Paths) != 4 || st.Paths[0].Plane != "p0" || st.Paths[1].Plane != "1" || st.Paths[3].Plane != "p3" {
		t.Fatalf("status paths %+v", st.Paths)
	}
	if len(st.Errors) != 0 {
		t.Fatalf("status errors %q with no rate limits", st.Errors)
	}

	// A rate policy: enforced by the transport at runtime, no error.
	d = doc("host-a", 4)
	d.Entropy, d.EgressBps, d.Ports[1].SpeedBps = 2, 100e9, 100e9
	planes[1].State, planes[1].CapacityRatio = "degraded", 0.25 // a 25 Gbit/s cap on p1
	putDoc(t, s.Client, d)
	putGenDoc(t, s.Client, contract.GenerationDoc{Generation: 4, PlanesGeneration: 4, Planes: planes})
	testutil.WaitFor(t, wait, "the connection on generation 4", func() bool { return conn.Stats().PathSetGeneration == 4 })
	testutil.WaitFor(t, wait, "generation 4 applied", func() bool { return ag.Status().AppliedGeneration == 4 })
	if errs := ag.Status().Errors; len(errs) != 0 {
		t.Fatalf("status errors %q for a rate policy the transport enforces", errs)
	}
}

func TestTransportApplierRejectsWhatTheTransportCannotUse(t *testing.T) {
	tr := listenTransport(t, 2)
	ap := NewTransportApplier(tr)
	d := resolved("host-a", 1) // 4 planes on a 2-plane transport
	if err := ap.Apply(d); !errors.Is(err, transport.ErrInvalidPathSet) {
		t.Fatalf("Apply = %v, want ErrInvalidPathSet", err)
	}
	d.PathSet.Planes = d.PathSet.Planes[:2]
	d.PathSet.Planes[0].Weight, d.PathSet.Planes[1].Weight = 0.5, 0.5
	if err := ap.Apply(d); err != nil {
		t.Fatal(err)
	}
	d.RatePolicy.IngressBps = 8e9
	if err := ap.Apply(d); err != nil {
		t.Fatalf("Apply with a rate policy = %v", err)
	}
}

func TestCollector(t *testing.T) {
	s := kvtest.New(t)
	rec := &recorder{}
	a := newAgent(t, Config{Endpoint: "host-a", Client: s.Client, Planes: 4}, rec)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(a.Collector())
	putRaw(t, s.Client, contract.KeyEndpoint("host-a"), "{")
	putGen(t, s.Client, 1)
	start(t, a)
	testutil.WaitFor(t, wait, "the rejection counted", func() bool { return a.ctr.rejected.Load() == 1 })
	putDoc(t, s.Client, doc("host-a", 2))
	putGen(t, s.Client, 2)
	// The counter is bumped after the applier returns: wait for both.
	testutil.WaitFor(t, wait, "generation 2 applied and counted", func() bool { return rec.last() == 2 && a.ctr.appliesEtcd.Load() == 1 })
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			got[name] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{
		"multiplane_agent_applies_total/etcd":            1,
		"multiplane_agent_applies_total/last-known-good": 0,
		"multiplane_agent_applied_generation":            2,
		"multiplane_agent_rejected_documents_total":      1,
		"multiplane_agent_errors":                        0,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

// A link cut under traffic is in the agent's status in etcd within a
// second of the cut, without waiting for the status interval: the cut
// plane unreachable, the others reachable.
func TestTransportApplierReportsACutLink(t *testing.T) {
	ctx := testenv.Context(t)
	s := kvtest.New(t)
	const planes = 3
	pc := make([]userspace.PlaneConfig, planes)
	for i := range pc {
		pc[i] = userspace.PlaneConfig{RateBps: 50e6}
	}
	fab, err := userspace.Start(ctx, userspace.Config{Hosts: 2, Port: testutil.FabricPort(t, 2, planes), Planes: pc, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fab.Close() })
	hosts := make([]*transport.Transport, 2)
	for h := range hosts {
		local := make([]netip.AddrPort, planes)
		for p := range local {
			local[p] = fab.ListenAddr(h, p)
		}
		if hosts[h], err = transport.Listen(transport.Config{Local: local, Logger: testenv.Logger(t)}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { hosts[h].Close() })
	}
	go func() {
		for {
			c, err := hosts[1].Accept(ctx)
			if err != nil {
				return
			}
			go func() {
				for _, err := c.Recv(ctx); err == nil; _, err = c.Recv(ctx) {
				}
			}()
		}
	}()
	peer := make([]netip.AddrPort, planes)
	for p := range peer {
		peer[p] = fab.PeerAddr(1, p)
	}
	conn, err := hosts[0].Dial(ctx, peer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		msg := make([]byte, 16<<10)
		for conn.Send(ctx, msg) == nil {
		}
	}()
	// A status interval far longer than the test: only the evidence
	// check writes the status.
	ag := newAgent(t, Config{Endpoint: "host-a", Client: s.Client, StatusInterval: time.Hour}, NewTransportApplier(hosts[0]))
	start(t, ag)
	verdict := func(st contract.StatusDoc) string {
		out := ""
		for _, p := range st.Paths {
			out += fmt.Sprintf("%s:%d/%d ", p.Plane, p.PeersReachable, p.PeersUnreachable)
		}
		return out
	}
	testutil.WaitFor(t, 10*time.Second, "every plane reachable in etcd", func() bool {
		st, _, ok := getStatus(t, s.Client, "host-a")
		return ok && verdict(st) == "0:1/0 1:1/0 2:1/0 "
	})
	cut := time.Now()
	fab.SetLinkUp(0, 1, false)
	var st contract.StatusDoc
	testutil.WaitFor(t, 5*time.Second, "plane 1 unreachable in etcd", func() bool {
		st, _, _ = getStatus(t, s.Client, "host-a")
		return verdict(st) == "0:1/0 1:0/1 2:1/0 "
	})
	took := time.Since(cut)
	t.Logf("cut link in etcd %v after the cut; plane 1: %+v", took.Round(time.Millisecond), st.Paths[1])
	// Without the evidence check the status waits for its interval (an
	// hour); 0.75 s here, about 1 s under -race.
	if took > 3*time.Second {
		t.Errorf("the cut took %v to reach etcd, want under 3 s", took)
	}
	if p := st.Paths[1].Peers; len(p) != 1 || p[0].Reachable || p[0].Address != fab.PeerAddr(1, 1).Addr().String() {
		t.Errorf("plane 1's peers %+v, want host-b's relay address unreachable", p)
	}
	fab.SetLinkUp(0, 1, true)
	testutil.WaitFor(t, 5*time.Second, "plane 1 reachable again in etcd", func() bool {
		st, _, _ = getStatus(t, s.Client, "host-a")
		return verdict(st) == "0:1/0 1:1/0 2:1/0 "
	})
}
