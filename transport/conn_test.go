package transport

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/multiplane/multiplane/fabricsim/userspace"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/transport/internal/protocol"
	"github.com/multiplane/multiplane/transport/internal/wire"
)

func TestGarbageDatagramsCountedAndDropped(t *testing.T) {
	ctx := testenv.Context(t)
	a := listenT(t, Config{Local: loopbackAddrs(2)})
	b := listenT(t, Config{Local: loopbackAddrs(2)})
	ca, cb := pair(t, ctx, a, b, b.LocalAddrs())
	u, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	const n = 500
	for i := 0; i < n; i++ {
		buf := make([]byte, rng.IntN(1500))
		for j := range buf {
			buf[j] = byte(rng.Uint32())
		}
		if len(buf) > 0 && i%2 == 0 {
			buf[0] = 1 // right version, so parsing goes further
		}
		if _, err := u.WriteToUDPAddrPort(buf, b.LocalAddrs()[i%2]); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.Stats().Garbage < n*9/10 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if g := b.Stats().Garbage; g < n*9/10 {
		t.Fatalf("garbage counted %d of %d", g, n)
	}
	// The connection still works.
	transfer(t, ctx, ca, cb, 10, 10000, 2)
}

func TestBackpressure(t *testing.T) {
	ctx := testenv.Context(t)
	a := listenT(t, Config{Local: loopbackAddrs(2), SendBuffer: 256 << 10})
	b := listenT(t, Config{Local: loopbackAddrs(2), ReceiveWindow: 128 << 10})
	ca, cb := pair(t, ctx, a, b, b.LocalAddrs())
	msg := make([]byte, 64<<10)
	// The receiver does not read: credit (128 KiB) and send buffer (256 KiB)
	// fill up and SendAsync blocks until its context ends.
	var comps []*Completion
	var blocked error
	for i := 0; i < 20; i++ {
		sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		c, err := ca.SendAsync(sctx, msg)
		cancel()
		if err != nil {
			blocked = err
			break
		}
		comps = append(comps, c)
	}
	if !errors.Is(blocked, context.DeadlineExceeded) || len(comps) > 6 {
		t.Fatalf("SendAsync did not block: %d queued, err %v", len(comps), blocked)
	}
	st := ca.Stats()
	if st.BytesAcked > 128<<10+64<<10 {
		t.Fatalf("sender got past the receive window: %d bytes acknowledged", st.BytesAcked)
	}
	// Reading releases everything.
	for range comps {
		if _, err := cb.Recv(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range comps {
		if err := c.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRateGrant(t *testing.T) {
	ctx := testenv.Context(t)
	const budget = 10e6 // bytes/s
	a := listenT(t, Config{Local: loopbackAddrs(2)})
	b := listenT(t, Config{Local: loopbackAddrs(2), IngressBudget: budget})
	ca, cb := pair(t, ctx, a, b, b.LocalAddrs())
	el := transfer(t, ctx, ca, cb, 40, 100000, 4) // ~3 MB
	rate := float64(cb.Stats().BytesReceived) / el.Seconds()
	t.Logf("granted %.1f MB/s, got %.1f MB/s", budget/1e6, rate/1e6)
	if rate > 1.3*budget {
		t.Fatalf("rate %.1f MB/s exceeds the grant %.1f MB/s", rate/1e6, budget/1e6)
	}
}

func TestPeerFailureReported(t *testing.T) {
	fp := startFabric(t, planesOf(2, userspace.PlaneConfig{RateBps: 20e6}), Config{PeerTimeout: 300 * time.Millisecond, PollMode: PollBlocking})
	ctx := testenv.Context(t)
	fp.f.SetUp(0, false)
	fp.f.SetUp(1, false)
	start := time.Now()
	err := fp.ca.Send(ctx, make([]byte, 1<<20))
	if !errors.Is(err, ErrPeerUnreachable) {
		t.Fatalf("send on a dead fabric: %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("failure reported after %v", el)
	}
	if _, err := fp.cb.Recv(ctx); !errors.Is(err, ErrPeerUnreachable) {
		t.Fatalf("recv on the other side: %v", err)
	}
}

func TestSetPathSetAtRuntime(t *testing.T) {
	fp := startFabric(t, planesOf(4, userspace.PlaneConfig{RateBps: 40e6}), Config{PollMode: PollBlocking})
	ctx := testenv.Context(t)
	if err := fp.a.SetPathSet(PathSet{Planes: []PlanePaths{{Plane: 5, Weight: 1}}}); !errors.Is(err, ErrInvalidPathSet) {
		t.Fatalf("bad path set accepted: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		transfer(t, ctx, fp.ca, fp.cb, 150, 32<<10, 4)
	}()
	// Drain planes 0 and 1 mid-transfer; plane 2 gets 3 entropy paths.
	deadline := time.Now().Add(5 * time.Second)
	for fp.ca.Stats().MessagesSent < 20 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	err := fp.a.SetPathSet(PathSet{Generation: 2, Planes: []PlanePaths{
		{Plane: 0, Weight: 0}, {Plane: 1, Weight: 0}, {Plane: 2, Weight: 1, Entropy: 3}, {Plane: 3, Weight: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	before := fp.ca.Stats()
	<-done
	after := fp.ca.Stats()
	for _, p := range []int{0, 1} {
		// At most what was already committed to the drained planes.
		if d := after.Planes[p].PacketsSent - before.Planes[p].PacketsSent; d > 64 {
			t.Errorf("plane %d got %d packets after it was drained", p, d)
		}
	}
	paths := 0
	for _, ps := range after.Paths {
		if ps.Plane == 2 && ps.PacketsSent > 0 {
			paths++
		}
	}
	if paths != 3 || after.PathSetGeneration != 2 {
		t.Fatalf("plane 2 used %d paths, generation %d", paths, after.PathSetGeneration)
	}
}

func TestECNMarksReachSender(t *testing.T) {
	fp := startFabric(t, planesOf(2, userspace.PlaneConfig{RateBps: 40e6, ECNThresholdBytes: 6000}), Config{PollMode: PollBlocking})
	ctx := testenv.Context(t)
	transfer(t, ctx, fp.ca, fp.cb, 60, 64<<10, 8)
	st := fp.ca.Stats()
	marked := fp.f.Stats(0).ECNMarked + fp.f.Stats(1).ECNMarked
	t.Logf("fabric marked %d, sender saw %d ECN echoes, %d retransmits", marked, st.ECNMarks, st.Retransmits)
	if marked == 0 || st.ECNMarks == 0 || st.ECNMarks > marked {
		t.Fatalf("fabric marked %d, sender saw %d", marked, st.ECNMarks)
	}
}

func TestProtocolViolationFailsLoudly(t *testing.T) {
	ctx := testenv.Context(t)
	a := listenT(t, Config{Local: loopbackAddrs(1)})
	b := listenT(t, Config{Local: loopbackAddrs(1)})
	ca, cb := pair(t, ctx, a, b, b.LocalAddrs())
	// A well-formed DATA packet whose chunk cannot be placed (a 100-byte
	// message has one chunk).
	d := wire.Data{DstConnID: protocol.ConnectionID(cb.ID()), Entropy: 9, Seq: 0, MessageID: 3, Chunk: 7, TotalLength: 100, Payload: make([]byte, 10)}
	u, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if _, err := u.WriteToUDPAddrPort(d.Append(nil), b.LocalAddrs()[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Recv(ctx); !errors.Is(err, ErrProtocol) {
		t.Fatalf("receiver: %v", err)
	}
	if _, err := ca.Recv(ctx); !errors.Is(err, ErrPeerClosed) {
		t.Fatalf("sender: %v", err)
	}
}

func TestManyConnectionsBothWays(t *testing.T) {
	ctx := testenv.Context(t)
	a := listenT(t, Config{Local: loopbackAddrs(3)})
	b := listenT(t, Config{Local: loopbackAddrs(3)})
	const conns = 8
	type pairT struct{ x, y *Conn }
	ps := make([]pairT, conns)
	for i := range ps {
		x, y := pair(t, ctx, a, b, b.LocalAddrs())
		ps[i] = pairT{x, y}
	}
	var wg sync.WaitGroup
	for _, p := range ps {
		for _, dir := range [][2]*Conn{{p.x, p.y}, {p.y, p.x}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				transfer(t, ctx, dir[0], dir[1], 20, 20000, 2)
			}()
		}
	}
	wg.Wait()
	if n := b.Stats().Connections; n != conns {
		t.Fatalf("%d connections on the acceptor", n)
	}
	for _, p := range ps {
		if err := p.x.Close(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.Stats().Connections != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := b.Stats().Connections; n != 0 {
		t.Fatalf("%d connections left after the peers closed", n)
	}
}

func TestRateGrantIsSharedAmongActiveSenders(t *testing.T) {
	ctx := testenv.Context(t)
	const budget = 12e6 // bytes/s
	b := listenT(t, Config{Local: loopbackAddrs(2), IngressBudget: budget})
	a := listenT(t, Config{Local: loopbackAddrs(2)})
	var conns [3][2]*Conn
	for i := range conns {
		conns[i][0], conns[i][1] = pair(t, ctx, a, b, b.LocalAddrs())
	}
	// An idle connection does not take a share: two senders get half each.
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			transfer(t, ctx, conns[i][0], conns[i][1], 20, 100000, 2)
		}()
	}
	wg.Wait()
	el := time.Since(start)
	total := float64(conns[0][1].Stats().BytesReceived + conns[1][1].Stats().BytesReceived)
	rate := total / el.Seconds()
	t.Logf("two senders, budget %.0f MB/s: together %.1f MB/s", budget/1e6, rate/1e6)
	// Under the race detector the senders cannot reach the budget (5.7 of
	// 12 MB/s measured); that they stay under it is still checked.
	if rate > 1.3*budget || (!raceEnabled && rate < 0.8*budget) {
		t.Fatalf("aggregate %.1f MB/s for a budget of %.1f MB/s", rate/1e6, budget/1e6)
	}
}

func TestIdleConnectionSurvivesPlaneLoss(t *testing.T) {
	fp := startFabric(t, planesOf(4, userspace.PlaneConfig{RateBps: 20e6}), Config{PeerTimeout: 400 * time.Millisecond, PollMode: PollBlocking})
	ctx := testenv.Context(t)
	for p := 1; p < 4; p++ {
		fp.f.SetUp(p, false)
	}
	// Idle for three peer timeouts: keepalives on the one live plane keep
	// both ends up.
	deadline := time.Now().Add(1200 * time.Millisecond)
	for time.Now().Before(deadline) {
		if fp.ca.Err() != nil || fp.cb.Err() != nil {
			t.Fatalf("idle connection failed: %v / %v", fp.ca.Err(), fp.cb.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
	transfer(t, ctx, fp.ca, fp.cb, 5, 20000, 1)
}

func TestLossyPathIsUsedLess(t *testing.T) {
	planes := planesOf(4, userspace.PlaneConfig{RateBps: 40e6})
	planes[0].Loss = 0.2
	fp := startFabric(t, planes, Config{PollMode: PollBlocking})
	ctx := testenv.Context(t)
	transfer(t, ctx, fp.ca, fp.cb, 80, 48<<10, 8)
	st := fp.ca.Stats()
	var others uint64
	for _, p := range st.Planes[1:] {
		others += p.PacketsSent
	}
	share := float64(st.Planes[0].PacketsSent) / float64(others/3)
	t.Logf("plane 0 (20%% loss) sent %.2f of a clean plane's packets; retransmits %d", share, st.Retransmits)
	if share > 0.75 {
		t.Fatalf("the lossy plane carried %.2f of a clean plane's load", share)
	}
}

// TestSetRatesAtRuntime caps a running connection's egress, then one
// plane, through SetRates, as the agent does with a rate policy.
func TestSetRatesAtRuntime(t *testing.T) {
	ctx := testenv.Context(t)
	a := listenT(t, Config{Local: loopbackAddrs(2)})
	b := listenT(t, Config{Local: loopbackAddrs(2)})
	ca, cb := pair(t, ctx, a, b, b.LocalAddrs())

	const egress = 5e6 // bytes/s
	if err := a.SetRates(egress, 0, nil); err != nil {
		t.Fatal(err)
	}
	el := transfer(t, ctx, ca, cb, 20, 100000, 4) // 2 MB
	if rate := float64(2e6) / el.Seconds(); rate > 1.3*egress {
		t.Fatalf("egress %.1f MB/s over the %.1f MB/s cap", rate/1e6, egress/1e6)
	}

	// Plane 1 capped hard, the connection uncapped: plane 1 carries little.
	const planeCap = 200e3
	if err := a.SetRates(0, 0, []Rate{0, planeCap}); err != nil {
		t.Fatal(err)
	}
	before := ca.Stats().Planes
	el = transfer(t, ctx, ca, cb, 40, 100000, 4) // 4 MB
	after := ca.Stats().Planes
	p0 := float64(after[0].BytesSent - before[0].BytesSent)
	p1 := float64(after[1].BytesSent - before[1].BytesSent)
	t.Logf("plane 0 %.1f MB, plane 1 %.2f MB in %v", p0/1e6, p1/1e6, el.Round(time.Millisecond))
	// Within the cap over the transfer, plus the pacer's initial burst.
	if limit := planeCap*el.Seconds() + 128e3; p1 > limit || p1 > 0.1*(p0+p1) {
		t.Fatalf("plane 1 sent %.0f B of %.0f B; its cap allows about %.0f B", p1, p0+p1, limit)
	}
	if err := a.SetRates(0, 0, []Rate{0, 0, 0}); err == nil {
		t.Fatal("SetRates accepted caps for planes the transport does not have")
	}
}

// TestTransportStatsCountRetransmitsPerPlane: the per-plane retransmits of
// the transport add up its connections', and survive their close.
func TestTransportStatsCountRetransmitsPerPlane(t *testing.T) {
	ctx := testenv.Context(t)
	a := listenT(t, Config{Local: loopbackAddrs(2)})
	b := listenT(t, Config{Local: loopbackAddrs(2)})
	ca, cb := pair(t, ctx, a, b, b.LocalAddrs())
	transfer(t, ctx, ca, cb, 20, 100000, 4)
	sum := func() (n uint64) {
		for _, p := range a.Stats().Planes {
			n += p.Retransmits
		}
		return n
	}
	var conn uint64
	for _, p := range ca.Stats().Planes {
		conn += p.Retransmits
	}
	if got := sum(); got != conn {
		t.Fatalf("transport retransmits %d, connection's %d", got, conn)
	}
	ca.Close()
	deadline := time.Now().Add(5 * time.Second)
	for a.Stats().Connections > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := sum(); got != conn {
		t.Fatalf("after close transport retransmits %d, want %d", got, conn)
	}
}

// busySenders dials n connections from a to b and keeps each sending
// messages of size bytes, with b reading them, until the test ends (before
// the transports close).
func busySenders(t *testing.T, ctx context.Context, a, b *Transport, n, size int) []*Conn {
	t.Helper()
	var xs []*Conn
	for range n {
		x, y := pair(t, ctx, a, b, b.LocalAddrs())
		xs = append(xs, x)
		go func() {
			for {
				if _, err := y.Recv(ctx); err != nil {
					return
				}
			}
		}()
	}
	msg := make([]byte, size)
	sendCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, x := range xs {
		wg.Go(func() {
			for sendCtx.Err() == nil {
				if err := x.Send(sendCtx, msg); err != nil && sendCtx.Err() == nil {
					t.Errorf("send: %v", err)
					return
				}
			}
		})
	}
	t.Cleanup(func() { stop(); wg.Wait() })
	return xs
}

// busyLoopback is busySenders between two 2-plane loopback transports.
func busyLoopback(t *testing.T, n, size int) (xs []*Conn, a, b *Transport) {
	t.Helper()
	a = listenT(t, Config{Local: loopbackAddrs(2)})
	b = listenT(t, Config{Local: loopbackAddrs(2)})
	return busySenders(t, testenv.Context(t), a, b, n, size), a, b
}

// Connections to one peer share each path's window: whatever their number,
// what they have in flight on a path together stays within the one window,
// and a connection that joins late starts at the established window, not
// with an initial window of its own.
func TestConnectionsShareEachPathsWindow(t *testing.T) {
	ctx := testenv.Context(t)
	const conns = 64
	xs, a, b := busyLoopback(t, conns, 256<<10)
	type key struct{ plane, entropy int }
	worst, worstSum, samples := 0.0, 0.0, 0
	dgram := xs[0].Stats().DatagramSize
	// What the connections have in flight on a path, as the shared state
	// counts it (each connection adds and takes out its own bytes), against
	// the largest window seen: a cut leaves what is in flight above the
	// window for a while (hence the slack below). Summing the connections'
	// own counts, read one after the other, double counted bytes that moved
	// between connections during the reading: 2.07 windows on a loaded CI
	// machine, 0.98-1.39 on an idle one.
	window := map[key]ByteCount{}
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		shared, sum := map[key]ByteCount{}, map[key]ByteCount{}
		for _, x := range xs {
			for _, p := range x.Stats().Paths {
				k := key{p.Plane, p.Entropy}
				shared[k] = max(shared[k], p.SharedBytesInFlight)
				sum[k] += p.BytesInFlight
				window[k] = max(window[k], p.CongestionWindow)
			}
		}
		for k, s := range shared {
			if s > 0 {
				samples++
				worst = max(worst, float64(s)/float64(window[k]+4*dgram))
				worstSum = max(worstSum, float64(sum[k])/float64(window[k]+4*dgram))
			}
		}
	}
	if samples == 0 {
		t.Fatal("nothing was ever in flight")
	}
	t.Logf("%d connections: in flight on a path, over all of them, at most %.2f of its window (plus 4 datagrams)", conns, worst)
	if worst > 2 { // one window, and what a cut to 0.7 leaves above it (one window each: 43)
		t.Errorf("%d connections had %.1f windows in flight on one path; want one", conns, worst)
	}
	// The connections' own counts agree, within what moves while they are read.
	if worstSum > 4 {
		t.Errorf("the connections' own bytes in flight summed to %.1f windows on one path; want about one", worstSum)
	}
	// A latecomer starts at the path's window.
	before := xs[0].Stats().Paths[0]
	late, _ := pair(t, ctx, a, b, b.LocalAddrs())
	for _, p := range late.Stats().Paths {
		if p.Plane == before.Plane && p.Entropy == before.Entropy && p.CongestionWindow != before.CongestionWindow &&
			p.CongestionWindow == 32*dgram {
			t.Errorf("a new connection started with its own initial window %d, not the path's %d", p.CongestionWindow, before.CongestionWindow)
		}
	}
}

// The receiver's budget is split max-min fair across sender hosts: each
// host is granted half, for all of its connections together, so a host
// with four connections gets no more than a host with one.
func TestRateGrantIsFairAcrossHostsFirst(t *testing.T) {
	ctx := testenv.Context(t)
	// Low enough that the grants bind under the race detector too (the
	// five senders reached 24 MB/s there): otherwise the host with four
	// sending goroutines gets more CPU, not more grant.
	const budget = 8e6 // bytes/s
	rx := listenT(t, Config{Local: loopbackAddrs(2), IngressBudget: budget})
	many := listenT(t, Config{Local: loopbackAddrs(2)})
	one := listenT(t, Config{Local: loopbackAddrs(2)})
	var senders, receivers []*Conn
	for range 4 {
		x, y := pair(t, ctx, many, rx, rx.LocalAddrs())
		senders, receivers = append(senders, x), append(receivers, y)
	}
	x, y := pair(t, ctx, one, rx, rx.LocalAddrs())
	senders, receivers = append(senders, x), append(receivers, y)
	sendCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	for _, c := range receivers {
		wg.Go(func() {
			for {
				if _, err := c.Recv(sendCtx); err != nil {
					return
				}
			}
		})
	}
	msg := make([]byte, 64<<10)
	for _, c := range senders {
		wg.Go(func() {
			for sendCtx.Err() == nil {
				c.Send(sendCtx, msg)
			}
		})
	}
	testutil.WaitFor(t, 10*time.Second, "a grant of half the budget to every connection of both hosts", func() bool {
		for _, c := range senders {
			if g := c.Stats().RateGrant; g < budget/2*9/10 || g > budget/2*11/10 {
				return false
			}
		}
		return true
	})
	hostBytes := func() (manyB, oneB uint64) {
		for i, c := range receivers {
			if i < 4 {
				manyB += c.Stats().BytesReceived
			} else {
				oneB += c.Stats().BytesReceived
			}
		}
		return
	}
	m0, o0 := hostBytes()
	start := time.Now()
	time.Sleep(time.Second)
	m1, o1 := hostBytes()
	el := time.Since(start).Seconds()
	manyRate, oneRate := float64(m1-m0)/el, float64(o1-o0)/el
	t.Logf("budget %.0f MB/s: host of 4 connections %.1f MB/s, host of 1 %.1f MB/s", budget/1e6, manyRate/1e6, oneRate/1e6)
	if manyRate+oneRate > 1.3*budget {
		t.Errorf("together %.1f MB/s over the budget %.0f MB/s", (manyRate+oneRate)/1e6, budget/1e6)
	}
	if manyRate > 1.5*oneRate {
		t.Errorf("the host of 4 connections got %.1f MB/s, the host of 1 %.1f MB/s: want about the same", manyRate/1e6, oneRate/1e6)
	}
}

// Connections that share a window share it fairly: 64 senders to one
// peer, each with data all the time, get Jain's index >= 0.95.
func TestConnectionsShareTheWindowFairly(t *testing.T) {
	const conns = 64
	xs, _, _ := busyLoopback(t, conns, 16<<10)
	time.Sleep(300 * time.Millisecond) // past the start
	before := make([]uint64, conns)
	for i, x := range xs {
		before[i] = x.Stats().BytesAcked
	}
	time.Sleep(time.Second)
	var sum, sq float64
	for i, x := range xs {
		d := float64(x.Stats().BytesAcked - before[i])
		sum += d
		sq += d * d
	}
	jain := sum * sum / (conns * sq)
	t.Logf("%d connections: %.1f MB/s together, Jain's index %.3f", conns, sum/1e6, jain)
	if jain < 0.95 {
		t.Errorf("Jain's index %.3f over %d connections sharing a window; want >= 0.95", jain, conns)
	}
}

// TestWithdrawTakesBackUnsentMessages: behind a slow egress cap most
// queued messages have not left; Withdraw takes those back, the others
// arrive, and messages sent afterwards arrive intact (their ids are given
// out again).
func TestWithdrawTakesBackUnsentMessages(t *testing.T) {
	ctx := testenv.Context(t)
	a := listenT(t, Config{Local: loopbackAddrs(2), EgressCap: 2e6})
	b := listenT(t, Config{Local: loopbackAddrs(2)})
	ca, cb := pair(t, ctx, a, b, b.LocalAddrs())
	const n, size = 20, 64 << 10
	var comps []*Completion
	for i := range n {
		msg := bytes.Repeat([]byte{byte(i)}, size)
		comp, err := ca.SendAsync(ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		comps = append(comps, comp)
	}
	testutil.WaitFor(t, 5*time.Second, "the first message on its way", func() bool { return ca.Stats().BytesSent > 0 })
	took, tookBytes := ca.Withdraw()
	if took < n/2 || took == n || tookBytes != int64(took)*size {
		t.Fatalf("Withdraw took %d messages (%d bytes) of %d queued", took, tookBytes, n)
	}
	if st := ca.Stats(); st.BytesQueued > ByteCount((n-took)*size) {
		t.Fatalf("%d bytes still queued after taking back %d of %d messages", st.BytesQueued, took, n)
	}
	for i, comp := range comps {
		err := comp.Wait(ctx)
		switch withdrawn := i >= n-took; {
		case withdrawn && !errors.Is(err, ErrWithdrawn):
			t.Fatalf("message %d: %v, want ErrWithdrawn", i, err)
		case !withdrawn && err != nil:
			t.Fatalf("message %d, on its way: %v", i, err)
		}
	}
	for i := range 3 {
		if err := ca.Send(ctx, bytes.Repeat([]byte{byte(100 + i)}, size)); err != nil {
			t.Fatal(err)
		}
	}
	// Every id given out is finished: none is left a gap that holds the
	// window of messages in flight.
	ca.mu.Lock()
	gap := ca.nextMsgID - ca.sendDone.below
	ca.mu.Unlock()
	if gap != 0 {
		t.Fatalf("%d message ids outstanding after every message completed", gap)
	}
	got := map[byte]int{}
	for range n - took + 3 {
		msg, err := cb.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(msg) != size || !bytes.Equal(msg, bytes.Repeat(msg[:1], size)) {
			t.Fatalf("message of %d bytes starting %d is not whole", len(msg), msg[0])
		}
		got[msg[0]]++
	}
	for i := range n - took {
		if got[byte(i)] != 1 {
			t.Errorf("message %d delivered %d times", i, got[byte(i)])
		}
	}
	for i := range 3 {
		if got[byte(100+i)] != 1 {
			t.Errorf("message %d after Withdraw delivered %d times", 100+i, got[byte(100+i)])
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if msg, err := cb.Recv(rctx); err == nil {
		t.Fatalf("a withdrawn message arrived: %d bytes starting %d", len(msg), msg[0])
	}
}

// TestWeightedConnectionsShareByWeight: connections of weight 2 get about
// twice the bytes of those of weight 1 while all of them have data.
func TestWeightedConnectionsShareByWeight(t *testing.T) {
	const conns = 16
	xs, _, _ := busyLoopback(t, conns, 1<<20)
	for _, x := range xs[:conns/2] {
		if err := x.SetWeight(2); err != nil {
			t.Fatal(err)
		}
	}
	if err := xs[0].SetWeight(0); err == nil {
		t.Fatal("SetWeight(0) accepted")
	}
	if err := xs[0].SetWeight(MaxWeight + 1); err == nil {
		t.Fatal("SetWeight above MaxWeight accepted")
	}
	time.Sleep(300 * time.Millisecond)
	before := make([]uint64, conns)
	for i, x := range xs {
		before[i] = x.Stats().BytesAcked
	}
	time.Sleep(1500 * time.Millisecond)
	var heavy, light float64
	for i, x := range xs {
		d := float64(x.Stats().BytesAcked - before[i])
		if i < conns/2 {
			heavy += d
		} else {
			light += d
		}
	}
	ratio := heavy / light
	t.Logf("weight 2: %.1f MB, weight 1: %.1f MB, ratio %.2f", heavy/1e6, light/1e6, ratio)
	if ratio < 1.6 || ratio > 2.5 {
		t.Fatalf("weight-2 connections got %.2f times the bytes of weight-1 ones, want about 2", ratio)
	}
}
