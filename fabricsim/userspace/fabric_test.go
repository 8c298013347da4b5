package userspace

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func start(t testing.TB, cfg Config) *Fabric {
	t.Helper()
	if cfg.Port == 0 {
		cfg.Port = testutil.FabricPort(t, cfg.Hosts, len(cfg.Planes))
	}
	cfg.Logger = testenv.Logger(t)
	f, err := Start(testenv.Context(t), cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// host is a test endpoint on one plane: rx listens where the relay
// delivers, tx sends from the host's plane address.
type host struct {
	rx, tx *net.UDPConn
}

func newHost(t testing.TB, f *Fabric, h, p int) host {
	t.Helper()
	rx, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(f.ListenAddr(h, p)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rx.Close() })
	tx, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(f.LocalAddr(h, p), 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Close() })
	for _, c := range []*net.UDPConn{rx, tx} {
		if _, err := tuneSocket(c, 4<<20); err != nil {
			t.Fatal(err)
		}
	}
	return host{rx, tx}
}

func (h host) send(t testing.TB, to netip.AddrPort, b []byte) {
	t.Helper()
	if _, err := h.tx.WriteToUDPAddrPort(b, to); err != nil {
		t.Fatal(err)
	}
}

// recv reads one datagram with its TOS byte, failing after d.
func (h host) recv(t testing.TB, d time.Duration) ([]byte, netip.AddrPort, byte) {
	t.Helper()
	b := make([]byte, 65536)
	oob := make([]byte, 64)
	_ = h.rx.SetReadDeadline(time.Now().Add(d))
	n, nn, _, from, err := h.rx.ReadMsgUDPAddrPort(b, oob)
	if err != nil {
		t.Fatalf("recv: %v", err)
	}
	return b[:n], from, parseTOS(oob[:nn])
}

func TestForwardBothWays(t *testing.T) {
	f := start(t, Config{Hosts: 3, Planes: make([]PlaneConfig, 4)})
	for p := range 4 {
		a, b := newHost(t, f, 0, p), newHost(t, f, 2, p)
		a.send(t, f.PeerAddr(2, p), []byte("ping"))
		got, from, _ := b.recv(t, 5*time.Second)
		if string(got) != "ping" || from != f.PeerAddr(0, p) {
			t.Fatalf("plane %d: got %q from %v, want ping from %v", p, got, from, f.PeerAddr(0, p))
		}
		b.send(t, from, []byte("pong"))
		got, from, _ = a.recv(t, 5*time.Second)
		if string(got) != "pong" || from != f.PeerAddr(2, p) {
			t.Fatalf("plane %d: got %q from %v", p, got, from)
		}
		// The relay counts a datagram after sending it: wait for the count.
		testutil.WaitFor(t, 5*time.Second, fmt.Sprintf("plane %d port 0 counters", p), func() bool {
			c := f.Stats(p).Ports[0].Counters
			return c.InPkts == 1 && c.OutPkts == 1 && c.InOctets == 4
		})
	}
}

func TestUnroutableDropped(t *testing.T) {
	f := start(t, Config{Hosts: 2, Planes: make([]PlaneConfig, 2)})
	// Plane 1's address sending into plane 0's relay is not on that plane.
	h := newHost(t, f, 0, 1)
	h.send(t, f.PeerAddr(1, 0), []byte("x"))
	testutil.WaitFor(t, 5*time.Second, "unroutable drop", func() bool { return f.Stats(0).Drops.Unroutable == 1 })
}

func TestLoss(t *testing.T) {
	const n, loss = 4000, 0.1
	f := start(t, Config{Hosts: 2, Planes: []PlaneConfig{{Loss: loss, Seed: 7}}})
	a, b := newHost(t, f, 0, 0), newHost(t, f, 1, 0)
	var got atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, err := b.rx.Read(buf); err != nil {
				return
			}
			got.Add(1)
		}
	}()
	for i := range n {
		a.send(t, f.PeerAddr(1, 0), make([]byte, 64))
		if i%100 == 99 { // stay within socket buffers
			testutil.WaitFor(t, 5*time.Second, "relay to keep up", func() bool { return f.Stats(0).Ports[0].Counters.InPkts == uint64(i+1) })
		}
	}
	testutil.WaitFor(t, 5*time.Second, "all datagrams accounted", func() bool {
		return got.Load()+int64(f.Stats(0).Drops.Loss) == n
	})
	st := f.Stats(0)
	if lost := float64(st.Drops.Loss) / n; lost < 0.08 || lost > 0.12 {
		t.Fatalf("loss %.3f, want ~%.2f", lost, loss)
	}
	if st.Ports[0].Counters.InErrors != st.Drops.Loss {
		t.Fatalf("in-errors %d != loss drops %d", st.Ports[0].Counters.InErrors, st.Drops.Loss)
	}
	f.SetLoss(0, 0)
	a.send(t, f.PeerAddr(1, 0), []byte("after"))
	testutil.WaitFor(t, 5*time.Second, "loss-free delivery", func() bool { return got.Load()+int64(f.Stats(0).Drops.Loss) == n+1 })
}

func TestRateAndQueue(t *testing.T) {
	const rate = 20e6
	f := start(t, Config{Hosts: 2, Planes: []PlaneConfig{{RateBps: rate, QueueBytes: 1 << 20}}})
	a, b := newHost(t, f, 0, 0), newHost(t, f, 1, 0)
	const n, size = 400, 1250 // 4 Mbit: 200 ms at 20 Mbit/s
	begin := time.Now()
	for range n {
		a.send(t, f.PeerAddr(1, 0), make([]byte, size))
	}
	for range n {
		b.recv(t, 5*time.Second)
	}
	el := time.Since(begin)
	bps := float64(n*size*8) / el.Seconds()
	t.Logf("shaped to %.1f Mbit/s in %v", bps/1e6, el)
	if bps > rate*1.1 || bps < rate*0.7 {
		t.Fatalf("throughput %.1f Mbit/s, want ~%.0f", bps/1e6, rate/1e6)
	}

	// A burst into a small queue overflows: drop-tail.
	f2 := start(t, Config{Hosts: 2, Planes: []PlaneConfig{{RateBps: 1e6, QueueBytes: 10000}}})
	c := newHost(t, f2, 0, 0)
	_ = newHost(t, f2, 1, 0)
	for range 100 {
		c.send(t, f2.PeerAddr(1, 0), make([]byte, 1000))
	}
	testutil.WaitFor(t, 5*time.Second, "burst accounted", func() bool { return f2.Stats(0).Ports[0].Counters.InPkts == 100 })
	st := f2.Stats(0)
	if st.Drops.QueueOverflow < 85 || st.Drops.QueueOverflow > 91 || st.Ports[1].Counters.OutDiscards != st.Drops.QueueOverflow {
		t.Fatalf("overflow drops %d (out-discards %d), want ~89", st.Drops.QueueOverflow, st.Ports[1].Counters.OutDiscards)
	}
}

func TestECNMarking(t *testing.T) {
	f := start(t, Config{Hosts: 2, Planes: []PlaneConfig{{RateBps: 10e6, QueueBytes: 1 << 20, ECNThresholdBytes: 5000}}})
	a, b := newHost(t, f, 0, 0), newHost(t, f, 1, 0)
	setTOS(t, a.tx, 0x02) // ECT(0)
	const n = 30
	for range n {
		a.send(t, f.PeerAddr(1, 0), make([]byte, 1000))
	}
	var ect, ce int
	for i := range n {
		_, _, tos := b.recv(t, 5*time.Second)
		switch tos & 3 {
		case 2:
			ect++
		case 3:
			ce++
		default:
			t.Fatalf("datagram %d: tos %#x lost its ECN bits", i, tos)
		}
	}
	// The first ~6 datagrams join a backlog below 5000 bytes.
	if ect < 4 || ect > 8 || ce != n-ect {
		t.Fatalf("ect %d ce %d", ect, ce)
	}
	if got := f.Stats(0).Ports[1].Counters.OutECNMarkedPkts; got != uint64(ce) {
		t.Fatalf("out-ecn-marked-pkts %d, want %d", got, ce)
	}
}

func setTOS(t testing.TB, c *net.UDPConn, tos int) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos) }); err != nil || serr != nil {
		t.Fatalf("IP_TOS: %v %v", err, serr)
	}
}

func TestReorderDeliversAllOnce(t *testing.T) {
	f := start(t, Config{Hosts: 2, Planes: []PlaneConfig{{Reorder: 0.2, ReorderDelay: 3 * time.Millisecond, Seed: 1}}})
	a, b := newHost(t, f, 0, 0), newHost(t, f, 1, 0)
	const n = 300
	for i := range n {
		a.send(t, f.PeerAddr(1, 0), binary.BigEndian.AppendUint32(nil, uint32(i)))
	}
	seen := make([]bool, n)
	inversions, last := 0, -1
	for range n {
		got, _, _ := b.recv(t, 5*time.Second)
		i := int(binary.BigEndian.Uint32(got))
		if seen[i] {
			t.Fatalf("datagram %d twice", i)
		}
		seen[i] = true
		if i < last {
			inversions++
		}
		last = max(last, i)
	}
	if inversions < 10 {
		t.Fatalf("only %d datagrams arrived out of order", inversions)
	}
}

func TestDelay(t *testing.T) {
	f := start(t, Config{Hosts: 2, Planes: []PlaneConfig{{Delay: 20 * time.Millisecond}}})
	a, b := newHost(t, f, 0, 0), newHost(t, f, 1, 0)
	begin := time.Now()
	a.send(t, f.PeerAddr(1, 0), []byte("x"))
	b.recv(t, 5*time.Second)
	if el := time.Since(begin); el < 20*time.Millisecond {
		t.Fatalf("arrived after %v, want ≥ 20ms", el)
	}
}

func TestPlaneAndLinkDown(t *testing.T) {
	f := start(t, Config{Hosts: 2, Planes: make([]PlaneConfig, 2)})
	a, b := newHost(t, f, 0, 1), newHost(t, f, 1, 1)
	f.SetUp(1, false)
	a.send(t, f.PeerAddr(1, 1), []byte("lost"))
	testutil.WaitFor(t, 5*time.Second, "down drop", func() bool { return f.Stats(1).Drops.Down == 1 })
	if st := f.Stats(1); st.Up || st.Ports[0].OperStatus != "DOWN" || st.Ports[0].Counters.InDiscards != 1 {
		t.Fatalf("stats while down: %+v", st)
	}
	f.SetUp(1, true)
	f.SetLinkUp(1, 1, false)
	a.send(t, f.PeerAddr(1, 1), []byte("lost"))
	testutil.WaitFor(t, 5*time.Second, "link down drop", func() bool { return f.Stats(1).Drops.Down == 2 })
	f.SetLinkUp(1, 1, true)
	a.send(t, f.PeerAddr(1, 1), []byte("ok"))
	if got, _, _ := b.recv(t, 5*time.Second); string(got) != "ok" {
		t.Fatalf("got %q", got)
	}
	if f.Stats(0).Drops.Down != 0 {
		t.Fatal("plane 0 affected")
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{Hosts: 0, Planes: make([]PlaneConfig, 1)},
		{Hosts: 2},
		{Hosts: 2, Planes: []PlaneConfig{{Loss: 2}}},
		{Hosts: 2, Planes: []PlaneConfig{{RateBps: -1}}},
	} {
		if _, err := Start(context.Background(), c); err == nil {
			t.Errorf("Start(%+v) succeeded", c)
		}
	}
}

func TestCloseStopsOnContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f, err := Start(ctx, Config{Hosts: 2, Port: testutil.FabricPort(t, 2, 2), Planes: make([]PlaneConfig, 2)})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	f.Close() // returns once every goroutine ended (goleak checks the rest)
	f.Close()
}
