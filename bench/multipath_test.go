package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/multiplane/multiplane/fabricsim/userspace"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/transport"
)

// TestTransportModesOverUserspaceFabric runs the bench in modes multipath
// and gbn through the userspace fabric (4 planes × 100 Mbit/s), every
// message verified.
func TestTransportModesOverUserspaceFabric(t *testing.T) {
	for _, tc := range []struct {
		mode          Mode
		loss, reorder float64
	}{
		{ModeMultipath, 0, 0},
		{ModeMultipath, 0.01, 0.01},
		{ModeGBN, 0, 0},
	} {
		t.Run(fmt.Sprintf("%s-loss%g-reorder%g", tc.mode, tc.loss, tc.reorder), func(t *testing.T) {
			ub := startUserspaceBench(t, userspace.PlaneConfig{RateBps: 100e6, Loss: tc.loss, Reorder: tc.reorder})
			ub.scfg.Mode, ub.ccfg.Mode = tc.mode, tc.mode
			srv, cli := ub.run(t)
			if cli.Messages == 0 || cli.Messages != srv.Messages || cli.Errors != 0 {
				t.Fatalf("client %+v server %+v", cli, srv)
			}
			for _, r := range []Result{cli, srv} {
				if r.IO == nil || r.IO.TxPerCall < 1 || r.IO.RxPerCall < 1 {
					t.Fatalf("%s: socket I/O %+v: want at least one datagram per call each way", r.Role, r.IO)
				}
			}
			t.Logf("%s: %.1f Mbit/s over the relay, retransmits %v, per plane %v, client I/O %+v", tc.mode, cli.GoodputBps/1e6, deref(cli.Retransmits), cli.PerPlaneBytes, *cli.IO)
			for p := range ub.f.Planes() {
				st := ub.f.Stats(p)
				t.Logf("plane %d: drops %+v ecn %d", p, st.Drops, st.ECNMarked)
			}
		})
	}
}

// A rate policy change is obeyed within 10 ms: the client's egress cap,
// 200 Mbit/s, is halved half a second into the run over 4 planes of 100
// Mbit/s. From the first 10 ms bucket of the client's egress series (the
// bytes its pacers release) that starts after the change on, the egress
// conforms to the new cap (+5% for datagram headers and a bucket's
// quantum) as a token bucket one bucket deep that starts with what the
// pacer may have saved (transport.PacingBurst), and before it to the old one.
// The server's verified series, which adds the fabric's delivery and the
// receiver's scheduling (jittery on a loaded 2-core machine), must conform
// within 50 ms, with bytes up to 50 ms late counted as on time (a
// receiver stalled under the race detector took in a backlog 513 ms after
// the step), and carry the new rate, not a stall.
func TestEgressCapStepObeyedWithin10ms(t *testing.T) {
	ub := startUserspaceBench(t, userspace.PlaneConfig{RateBps: 100e6})
	const before, after = 100e6, 50e6
	ub.scfg.Series, ub.ccfg.Series = 10*time.Millisecond, 10*time.Millisecond
	ub.scfg.Size, ub.ccfg.Size = 8192, 8192
	ub.ccfg.Duration = 1500 * time.Millisecond
	ub.ccfg.EgressCap, ub.ccfg.EgressStep = before, RateStep{After: 500 * time.Millisecond, Bps: after}
	srv, cli := ub.run(t)
	if len(cli.RateChanges) != 2 || srv.Series == nil || cli.EgressSeries == nil {
		t.Fatalf("rate changes %+v, series %v, egress series %v", cli.RateChanges, srv.Series != nil, cli.EgressSeries != nil)
	}
	step := cli.RateChanges[1].AtUnixNs
	eg := cli.EgressSeries
	end := eg.StartUnixNs + int64(ub.ccfg.Duration)
	settle, ok := eg.Settle(step, end, 1.05*after, transport.PacingBurst)
	t.Logf("egress: before the step %.0f Mbit/s, after %.0f; settled %v after it; 10 ms buckets around it (Mbit/s): %.0f",
		eg.Mean(eg.StartUnixNs+int64(100*time.Millisecond), step)/1e6, eg.Mean(step+int64(50*time.Millisecond), end)/1e6, settle, around(eg, step))
	if !ok || settle >= 10*time.Millisecond {
		t.Errorf("egress kept within the new cap %v after the step (found %v), want within 10 ms", settle, ok)
	}
	from := eg.StartUnixNs + int64(50*time.Millisecond) // past the start-up
	if d, ok := eg.Settle(from, step-int64(10*time.Millisecond), 1.05*before, transport.PacingBurst); !ok || d >= 10*time.Millisecond {
		t.Errorf("before the step egress was over the first cap (kept to it %v after 50 ms, %v); its 10 ms buckets (Mbit/s): %.0f",
			d, ok, around(eg, from+int64(50*time.Millisecond)))
	}

	s := srv.Series
	end = s.StartUnixNs + int64(ub.ccfg.Duration)
	settle, ok = s.SettleLate(step, end, 1.05*after, transport.PacingBurst, 50*time.Millisecond)
	t.Logf("server: before the step %.0f Mbit/s, after %.0f; settled %v after it; 10 ms buckets around it (Mbit/s): %.0f",
		s.Mean(s.StartUnixNs+int64(100*time.Millisecond), step)/1e6, s.Mean(step+int64(50*time.Millisecond), end)/1e6, settle, around(s, step))
	if !ok || settle >= 50*time.Millisecond {
		t.Errorf("verified goodput kept within the new cap %v after the step (found %v), want within 50 ms", settle, ok)
	}
	if got := s.Mean(step+int64(50*time.Millisecond), end); got < 0.5*after {
		t.Errorf("after the step goodput %.0f Mbit/s: the cap stalled the connection", got/1e6)
	}
}

// around returns the series' buckets from 50 ms before at to 100 ms after.
func around(s *Series, at int64) []float64 {
	w := int64(s.WidthSeconds * 1e9)
	i := int((at - s.StartUnixNs) / w)
	lo, hi := max(0, i-5), min(len(s.Bps), i+10)
	out := make([]float64, 0, hi-lo)
	for _, b := range s.Bps[lo:hi] {
		out = append(out, b/1e6)
	}
	return out
}

// userspaceBench is a bench server and client on two hosts of a userspace
// fabric of 4 planes: multipath, 64 KiB messages, 1 connection, 1 s.
type userspaceBench struct {
	f          *userspace.Fabric
	ctx        context.Context
	scfg, ccfg Config
}

func startUserspaceBench(t *testing.T, pc userspace.PlaneConfig) *userspaceBench {
	const planes = 4
	pcs := make([]userspace.PlaneConfig, planes)
	for i := range pcs {
		pcs[i] = pc
		pcs[i].Seed = int64(i)
	}
	ctx, cancel := context.WithTimeout(testenv.Context(t), 60*time.Second)
	t.Cleanup(cancel)
	f, err := userspace.Start(ctx, userspace.Config{Hosts: 2, Planes: pcs, Port: testutil.FabricPort(t, 2, planes), Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var srvBind, cliBind, peer []netip.Addr
	for p := range planes {
		srvBind = append(srvBind, f.LocalAddr(1, p))
		cliBind = append(cliBind, f.LocalAddr(0, p))
		peer = append(peer, f.PeerAddr(1, p).Addr())
	}
	base := Config{Mode: ModeMultipath, Port: f.Port(), Size: 65536, Duration: time.Second, Conns: 1,
		ConnectTimeout: 5 * time.Second, Interval: 250 * time.Millisecond, MTU: 1500}
	ub := &userspaceBench{f: f, ctx: ctx, scfg: base, ccfg: base}
	ub.scfg.Role, ub.scfg.Bind, ub.scfg.Timeout = RoleServer, srvBind, 50*time.Second
	ub.ccfg.Role, ub.ccfg.Bind, ub.ccfg.Peer = RoleClient, cliBind, peer
	return ub
}

// run runs the server and the client through Run (flags validated) and
// fails the test if either fails.
func (ub *userspaceBench) run(t *testing.T) (srv, cli Result) {
	t.Helper()
	type res struct {
		r   Result
		err error
	}
	done := make(chan res, 1)
	go func() {
		r, err := Run(ub.ctx, ub.scfg, &bytes.Buffer{}, &bytes.Buffer{})
		done <- res{r, err}
	}()
	var out, errb bytes.Buffer
	cli, cerr := Run(ub.ctx, ub.ccfg, &out, &errb)
	s := <-done
	if cerr != nil || s.err != nil {
		t.Fatalf("client: %v, server: %v\n%s%s", cerr, s.err, out.String(), errb.String())
	}
	return s.r, cli
}

func deref(p *int64) any {
	if p == nil {
		return "unknown"
	}
	return *p
}

// TestWindowForBoundsMemory: the send slots of all connections together
// stay near inflightBudget (or one message per connection), whatever -q.
func TestWindowForBoundsMemory(t *testing.T) {
	for _, tc := range []struct{ conns, size, want int }{
		{1, 65536, maxWindow},
		{64, 65536, 8},
		{1024, 65536, 1},
		{8192, 65536, 1},
		{8192, 64, maxWindow},
		{1, 16 << 20, 2},
	} {
		got := windowFor(tc.conns, tc.size)
		if got != tc.want {
			t.Errorf("windowFor(%d, %d) = %d, want %d", tc.conns, tc.size, got, tc.want)
		}
		if mem := tc.conns * got * tc.size; mem > max(inflightBudget, tc.conns*tc.size) {
			t.Errorf("-q %d -s %d: %d MiB of send slots", tc.conns, tc.size, mem>>20)
		}
	}
}
