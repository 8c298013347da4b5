package transport

import (
	"testing"
	"time"

	"github.com/multiplane/multiplane/fabricsim/userspace"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
)

// TestPeersReportPerPlaneEvidence: while messages flow, both ends hear
// and are acknowledged on every plane, know the peer's address on each and
// have an RTT; once a plane is cut, that plane's evidence ages while the
// other's stays fresh.
func TestPeersReportPerPlaneEvidence(t *testing.T) {
	fp := startFabric(t, planesOf(2, userspace.PlaneConfig{RateBps: 50e6}), Config{PollMode: PollBlocking})
	ctx := testenv.Context(t)
	go func() {
		for {
			if _, err := fp.cb.Recv(ctx); err != nil {
				return
			}
		}
	}()
	stop := make(chan struct{})
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		msg := make([]byte, 16<<10)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := fp.ca.Send(ctx, msg); err != nil {
				return
			}
		}
	}()
	defer func() { close(stop); <-sent }()
	fresh := func(at time.Time) bool { return !at.IsZero() && time.Since(at) < 200*time.Millisecond }
	testutil.WaitFor(t, 5*time.Second, "both planes heard and acknowledged", func() bool {
		ps := fp.a.Peers()
		if len(ps) != 1 || len(ps[0].Planes) != 2 {
			return false
		}
		for _, p := range ps[0].Planes {
			if !fresh(p.Heard) || !fresh(p.Acked) || !p.Addr.IsValid() || p.SmoothedRTT <= 0 {
				return false
			}
		}
		return true
	})
	for i, p := range fp.a.Peers()[0].Planes {
		if p.Addr != fp.f.PeerAddr(1, i) {
			t.Fatalf("plane %d: peer address %v, want %v", i, p.Addr, fp.f.PeerAddr(1, i))
		}
	}
	bs := fp.b.Peers()
	if len(bs) != 1 || !fresh(bs[0].Heard) || !fresh(bs[0].Planes[0].Heard) || !fresh(bs[0].Planes[1].Heard) {
		t.Fatalf("the receiver's view of its sender: %+v", bs)
	}

	if u := fp.a.Peers()[0].Planes[1].Unacked; !u.IsZero() && time.Since(u) > 200*time.Millisecond {
		t.Fatalf("plane 1 works, but its data has waited since %v", u)
	}
	cut := time.Now()
	fp.f.SetUp(1, false)
	time.Sleep(500 * time.Millisecond)
	p := fp.a.Peers()[0]
	if !fresh(p.Heard) || !fresh(p.Planes[0].Heard) || !fresh(p.Planes[0].Acked) {
		t.Fatalf("plane 0 still works, but its evidence is stale: %+v", p.Planes[0])
	}
	if fresh(p.Planes[1].Heard) || fresh(p.Planes[1].Acked) {
		t.Fatalf("plane 1 is cut, but its evidence is fresh: %+v", p.Planes[1])
	}
	if p.Planes[1].Heard.IsZero() || p.Planes[1].Acked.IsZero() {
		t.Fatalf("plane 1 worked before the cut, but its evidence says never: %+v", p.Planes[1])
	}
	// Data (probes of the retired path) waits on plane 1 since the cut;
	// nothing waits long on plane 0.
	if u := p.Planes[1].Unacked; u.IsZero() || u.After(cut.Add(100*time.Millisecond)) {
		t.Fatalf("plane 1 is cut at %v, but its data waits since %v", cut, u)
	}
	if u := p.Planes[0].Unacked; !u.IsZero() && time.Since(u) > 200*time.Millisecond {
		t.Fatalf("plane 0 works, but its data has waited since %v", u)
	}
}

// TestPeersIdleConnectionWaitsOnNoPlane: once a burst is delivered and the
// connection idles, no plane shows data waiting for an acknowledgement
// (the last ACKs of a burst, less than a millisecond apart, end the wait).
func TestPeersIdleConnectionWaitsOnNoPlane(t *testing.T) {
	fp := startFabric(t, planesOf(3, userspace.PlaneConfig{RateBps: 500e6}), Config{PollMode: PollBlocking})
	ctx := testenv.Context(t)
	msg := make([]byte, 64<<10)
	for range 3 {
		for range 20 {
			if err := fp.ca.Send(ctx, msg); err != nil {
				t.Fatal(err)
			}
		}
		for range 20 {
			if _, err := fp.cb.Recv(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var p PeerStats
		testutil.WaitFor(t, 5*time.Second, "no plane waiting once the burst is delivered", func() bool {
			p = fp.a.Peers()[0]
			for _, pl := range p.Planes {
				if !pl.Unacked.IsZero() {
					return false
				}
			}
			return true
		})
		for _, pl := range p.Planes {
			if pl.Sent.IsZero() || pl.Acked.Before(pl.Sent) {
				t.Fatalf("plane %d: sent %v, acknowledged %v: the last send is not acknowledged", pl.Plane, pl.Sent, pl.Acked)
			}
		}
	}
}
