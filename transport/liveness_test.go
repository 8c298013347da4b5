package transport

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/multiplane/multiplane/fabricsim/userspace"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
)

// blackhole redirects everything c sends (data, ACKs, keepalives) to an
// address that never answers, and returns a function that undoes it: the
// connection's peer then hears nothing on it, as when its packets are lost
// behind other connections' in full queues.
func blackhole(t *testing.T, c *Conn, hole netip.AddrPort) (restore func()) {
	t.Helper()
	c.mu.Lock()
	saved := append([]netip.AddrPort(nil), c.peerAddrs...)
	for i := range c.peerAddrs {
		c.peerAddrs[i] = hole
	}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		copy(c.peerAddrs, saved)
		c.mu.Unlock()
		c.wakeSender()
	}
}

func sinceHeardOnConn(c *Conn) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Since(c.lastRecv)
}

func initDone(c *Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, ok := range c.initAcked {
		if !ok && c.validPlane(i) {
			return false
		}
	}
	return true
}

// TestStarvedConnectionsSurviveWhilePeerIsHeard: most connections to a
// peer hear nothing on themselves for three peer timeouts, in both
// directions and with a message in flight, while the peer is heard on the
// others; none fails, and once their packets get through again the
// messages are delivered.
func TestStarvedConnectionsSurviveWhilePeerIsHeard(t *testing.T) {
	const (
		conns       = 12
		starved     = 9
		peerTimeout = 300 * time.Millisecond
	)
	ctx := testenv.Context(t)
	cfg := Config{Local: loopbackAddrs(2), PeerTimeout: peerTimeout, PollMode: PollBlocking}
	a, b := listenT(t, cfg), listenT(t, cfg)
	hole, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hole.Close() })
	holeAddr := hole.LocalAddr().(*net.UDPAddr).AddrPort()

	var xs, ys []*Conn
	for range conns {
		x, y := pair(t, ctx, a, b, b.LocalAddrs())
		xs, ys = append(xs, x), append(ys, y)
	}
	if na, nb := a.peerCount(), b.peerCount(); na != 1 || nb != 1 {
		t.Fatalf("%d connections to one peer make %d peers on the dialer, %d on the acceptor; want 1", conns, na, nb)
	}
	testutil.WaitFor(t, 5*time.Second, "every INIT acknowledged", func() bool {
		for _, x := range xs {
			if !initDone(x) {
				return false
			}
		}
		return true
	})

	var restores []func()
	var comps []*Completion
	for i := 0; i < starved; i++ {
		restores = append(restores, blackhole(t, xs[i], holeAddr), blackhole(t, ys[i], holeAddr))
		comp, err := xs[i].SendAsync(ctx, make([]byte, 20000+i))
		if err != nil {
			t.Fatal(err)
		}
		comps = append(comps, comp)
	}
	testutil.WaitFor(t, 20*peerTimeout, "starved connections silent for 3 peer timeouts", func() bool {
		for _, c := range append(xs[:starved:starved], ys[:starved]...) {
			if sinceHeardOnConn(c) < 3*peerTimeout {
				return false
			}
		}
		return true
	})
	for i := range conns {
		if err := xs[i].Err(); err != nil {
			t.Fatalf("dialed connection %d (starved %v) failed while its peer was heard: %v", i, i < starved, err)
		}
		if err := ys[i].Err(); err != nil {
			t.Fatalf("accepted connection %d (starved %v) failed while its peer was heard: %v", i, i < starved, err)
		}
	}

	for _, r := range restores {
		r()
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for i, comp := range comps {
		if err := comp.Wait(rctx); err != nil {
			t.Fatalf("message on starved connection %d: %v", i, err)
		}
		msg, err := ys[i].Recv(rctx)
		if err != nil || len(msg) != 20000+i {
			t.Fatalf("starved connection %d delivered %d bytes, err %v", i, len(msg), err)
		}
	}
}

// TestSilentPeerFailsAllConnections: when the peer goes silent on every
// plane, every one of its connections, on both ends, fails with
// ErrPeerUnreachable within PeerTimeout and a bound, and the transports
// forget the peer.
func TestSilentPeerFailsAllConnections(t *testing.T) {
	const (
		conns       = 8
		peerTimeout = 300 * time.Millisecond
		bound       = 700 * time.Millisecond
	)
	fp := startFabric(t, planesOf(2, userspace.PlaneConfig{RateBps: 20e6}), Config{PeerTimeout: peerTimeout, PollMode: PollBlocking})
	ctx := testenv.Context(t)
	peer := []netip.AddrPort{fp.f.PeerAddr(1, 0), fp.f.PeerAddr(1, 1)}
	all := []*Conn{fp.ca, fp.cb}
	for range conns - 1 {
		x, y := pair(t, ctx, fp.a, fp.b, peer)
		all = append(all, x, y)
	}
	if na, nb := fp.a.peerCount(), fp.b.peerCount(); na != 1 || nb != 1 {
		t.Fatalf("%d connections to one peer make %d peers on the dialer, %d on the acceptor; want 1", conns, na, nb)
	}
	fp.f.SetUp(0, false)
	fp.f.SetUp(1, false)
	start := time.Now()
	testutil.WaitFor(t, peerTimeout+bound, "every connection failed", func() bool {
		for _, c := range all {
			if c.Err() == nil {
				return false
			}
		}
		return true
	})
	el := time.Since(start)
	for _, c := range all {
		c.wg.Wait() // the sender goroutine logs the failure after reporting it
	}
	for i, c := range all {
		if err := c.Err(); !errors.Is(err, ErrPeerUnreachable) {
			t.Fatalf("connection %d ended with %v, want ErrPeerUnreachable", i, err)
		}
	}
	// Heard at most a keepalive interval (PeerTimeout/4) before the fabric
	// went down: failing much sooner would be a false alarm.
	if el < peerTimeout/2 {
		t.Fatalf("connections failed %v after the peer went silent, before the %v peer timeout", el, peerTimeout)
	}
	t.Logf("all %d connections failed %v after the peer went silent (timeout %v)", len(all), el.Round(time.Millisecond), peerTimeout)
	if na, nb := fp.a.peerCount(), fp.b.peerCount(); na != 0 || nb != 0 {
		t.Fatalf("peers still tracked after every connection ended: %d, %d", na, nb)
	}
}

// TestPeerMergesAcrossPlanes: connections first heard on different planes
// are one peer as soon as a connection links their addresses; what is
// heard on one is heard on all, and the peer is forgotten with its last
// connection.
func TestPeerMergesAcrossPlanes(t *testing.T) {
	tr := listenT(t, Config{Local: loopbackAddrs(2)})
	x := netip.MustParseAddrPort("10.0.0.1:4000")
	y := netip.MustParseAddrPort("10.0.1.1:4000")
	conn := func() *Conn {
		c := newConn(tr, ModeMultipath, true)
		if err := tr.register(c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	now := tr.epoch.Add(time.Second)
	c1, c2, c3 := conn(), conn(), conn()
	tr.joinPeer(c1, now, peerAddr{0, x})
	tr.joinPeer(c2, now, peerAddr{1, y})
	if n := tr.peerCount(); n != 2 {
		t.Fatalf("%d peers before a connection links the addresses, want 2", n)
	}
	tr.joinPeer(c3, now, peerAddr{0, x})
	tr.joinPeer(c3, now, peerAddr{1, y})
	if n := tr.peerCount(); n != 1 {
		t.Fatalf("%d peers after a connection linked the addresses, want 1", n)
	}
	later := now.Add(time.Minute)
	c1.mu.Lock()
	c1.heard(later, 0)
	c1.mu.Unlock()
	c2.mu.Lock()
	got := c2.lastHeard()
	c2.mu.Unlock()
	if !got.Equal(later) {
		t.Fatalf("heard on one connection at %v, its sibling says %v", later, got)
	}
	for i, c := range []*Conn{c1, c2, c3} {
		if n := tr.peerCount(); n != 1 {
			t.Fatalf("%d peers with %d of 3 connections gone, want 1", n, i)
		}
		tr.unregister(c)
	}
	if n := tr.peerCount(); n != 0 {
		t.Fatalf("%d peers after the last connection, want 0", n)
	}
}

// TestDialingConnectionWaitsForItsTimers: while a peer does not answer, the
// dialing connection runs for its INIT retransmissions only (from every
// 100 ms, backing off), not on every turn of its worker.
func TestDialingConnectionWaitsForItsTimers(t *testing.T) {
	silent, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	const timeout = 300 * time.Millisecond
	tr := listenT(t, Config{Local: loopbackAddrs(1), HandshakeTimeout: timeout})
	var found atomic.Pointer[Conn]
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for found.Load() == nil {
			tr.mu.Lock()
			for _, c := range tr.conns {
				found.Store(c)
			}
			tr.mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	_, err = tr.Dial(testenv.Context(t), []netip.AddrPort{silent.LocalAddr().(*net.UDPAddr).AddrPort()})
	close(stop)
	<-watched
	if !errors.Is(err, ErrHandshakeTimeout) {
		t.Fatalf("dial to a silent peer: %v", err)
	}
	dialing := found.Load()
	if dialing == nil {
		t.Fatal("the dialing connection was never registered")
	}
	dialing.mu.Lock()
	runs := dialing.stats.runs
	dialing.mu.Unlock()
	t.Logf("%v of handshake: %d sender runs", timeout, runs)
	if max := 3 * int(timeout/initInterval); runs > uint64(max) {
		t.Fatalf("%d sender runs in %v of handshake, want at most %d (INIT every %v)", runs, timeout, max, initInterval)
	}
}

// TestDialRetriesBackOff: INITs to a silent peer back off (100 ms, then
// doubling, with jitter) instead of repeating at a fixed interval, so many
// dials into a server that is behind do not bury it in retries.
func TestDialRetriesBackOff(t *testing.T) {
	silent, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	var arrivals []time.Time
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 2048)
		for {
			if _, _, err := silent.ReadFromUDP(buf); err != nil {
				return
			}
			arrivals = append(arrivals, time.Now())
		}
	}()
	const timeout = 1500 * time.Millisecond
	tr := listenT(t, Config{Local: loopbackAddrs(1), HandshakeTimeout: timeout})
	if _, err := tr.Dial(testenv.Context(t), []netip.AddrPort{silent.LocalAddr().(*net.UDPAddr).AddrPort()}); !errors.Is(err, ErrHandshakeTimeout) {
		t.Fatalf("dial to a silent peer: %v", err)
	}
	silent.Close()
	<-read
	var gaps []time.Duration
	for i := 1; i < len(arrivals); i++ {
		gaps = append(gaps, arrivals[i].Sub(arrivals[i-1]).Round(time.Millisecond))
	}
	t.Logf("%d INITs in %v, gaps %v", len(arrivals), timeout, gaps)
	// 100, 200, 400, 800 ms ±25%: 4 to 6 INITs in 1.5 s (60 at a fixed 25 ms).
	if len(arrivals) < 3 || len(arrivals) > 7 {
		t.Fatalf("%d INITs in %v of handshake, want 3 to 7", len(arrivals), timeout)
	}
	if last, first := gaps[len(gaps)-1], gaps[0]; last < 2*first {
		t.Fatalf("INIT gaps %v do not grow", gaps)
	}
}

// TestRefusedConnectionIsNotAcknowledged: with the accept backlog full,
// dials fail; none may be answered on another plane for the connection
// being refused (its peer would send into a connection that is gone).
func TestRefusedConnectionIsNotAcknowledged(t *testing.T) {
	ctx := testenv.Context(t)
	srv := listenT(t, Config{Local: loopbackAddrs(4), AcceptBacklog: 1})
	cli := listenT(t, Config{Local: loopbackAddrs(4), HandshakeTimeout: 150 * time.Millisecond})
	first, err := cli.Dial(ctx, srv.LocalAddrs()) // fills the backlog: never accepted
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	for i := range 8 {
		c, err := cli.Dial(ctx, srv.LocalAddrs())
		if err == nil {
			c.Close()
			t.Fatalf("dial %d succeeded with the accept backlog full", i)
		}
		if !errors.Is(err, ErrHandshakeTimeout) {
			t.Fatalf("dial %d: %v, want ErrHandshakeTimeout", i, err)
		}
	}
}

// TestKeepalivesArePerPeer: idle connections to one peer keep it alive
// with keepalives per plane, not per connection (a receiver of 4,000
// connections sent more keepalives than ACKs), and every connection stays
// usable.
func TestKeepalivesArePerPeer(t *testing.T) {
	const (
		conns       = 40
		planes      = 2
		peerTimeout = 400 * time.Millisecond // a keepalive period of 100 ms
		idle        = 8 * peerTimeout
	)
	ctx := testenv.Context(t)
	cfg := Config{Local: loopbackAddrs(planes), PeerTimeout: peerTimeout, PollMode: PollBlocking}
	a, b := listenT(t, cfg), listenT(t, cfg)
	var xs, ys []*Conn
	for range conns {
		x, y := pair(t, ctx, a, b, b.LocalAddrs())
		xs, ys = append(xs, x), append(ys, y)
	}
	testutil.WaitFor(t, 5*time.Second, "every INIT acknowledged", func() bool {
		for _, x := range xs {
			if !initDone(x) {
				return false
			}
		}
		return true
	})
	txPackets := func() (n uint64) {
		for _, tr := range []*Transport{a, b} {
			for _, p := range tr.Stats().Planes {
				n += p.TxPackets
			}
		}
		return n
	}
	before := txPackets()
	time.Sleep(idle)
	sent := txPackets() - before

	// Per peer: each side speaks on each plane about once a period. Per
	// connection it was conns times that (2 × 40 × 2 × 32 = 5,120).
	periods := uint64(idle / (peerTimeout / 4))
	if limit := 2 * planes * periods * 2; sent > limit {
		t.Errorf("idle for %v, %d connections sent %d datagrams; want at most %d (keepalives per peer and plane)", idle, conns, sent, limit)
	}
	for i := range conns {
		if err := xs[i].Err(); err != nil {
			t.Fatalf("dialed connection %d failed while idle: %v", i, err)
		}
		if err := ys[i].Err(); err != nil {
			t.Fatalf("accepted connection %d failed while idle: %v", i, err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for i := range conns {
		if err := xs[i].Send(rctx, make([]byte, 100+i)); err != nil {
			t.Fatalf("connection %d after the idle time: %v", i, err)
		}
		if msg, err := ys[i].Recv(rctx); err != nil || len(msg) != 100+i {
			t.Fatalf("connection %d delivered %d bytes after the idle time, err %v", i, len(msg), err)
		}
	}
	t.Logf("idle %v: %d datagrams for %d connections on %d planes", idle, sent, conns, planes)
}
