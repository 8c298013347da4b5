package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/multiplane/multiplane/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func requireTools(t *testing.T) {
	t.Helper()
	testenv.RequireNetns(t)
	for _, c := range []string{"tc", "nft", "ethtool", "sysctl"} {
		testenv.RequireCommand(t, c)
	}
}

var fabricSeq atomic.Int32

func start(t *testing.T, cfg Config) *Fabric {
	t.Helper()
	requireTools(t)
	cfg.Name = fmt.Sprintf("mpfab-%d-t%d", os.Getpid(), fabricSeq.Add(1))
	cfg.Logger = testenv.Logger(t)
	ctx, cancel := context.WithTimeout(testenv.Context(t), 60*time.Second)
	defer cancel()
	f, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f
}

// udpIn opens a UDP socket in host h's namespace.
func udpIn(t *testing.T, f *Fabric, h int, addr netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := f.Do(h, func() (err error) {
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(addr))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetReadBuffer(8 << 20)
	return c
}

// echoWithin reports whether a datagram from host 0 reaches host 1 on plane
// p within d. It resends every 100ms: on a lossy plane the datagram, or the
// ARP exchange before it, may be dropped by the loss rule.
func echoWithin(t *testing.T, f *Fabric, p int, d time.Duration) bool {
	t.Helper()
	rx := udpIn(t, f, 1, netip.AddrPortFrom(f.Addr(1, p), 0))
	tx := udpIn(t, f, 0, netip.AddrPortFrom(f.Addr(0, p), 0))
	dst := rx.LocalAddr().(*net.UDPAddr).AddrPort()
	deadline := time.Now().Add(d)
	buf := make([]byte, 64)
	for time.Now().Before(deadline) {
		if _, err := tx.WriteToUDPAddrPort([]byte("hello"), dst); err != nil {
			return false
		}
		rd := time.Now().Add(100 * time.Millisecond)
		if rd.After(deadline) {
			rd = deadline
		}
		_ = rx.SetReadDeadline(rd)
		n, from, err := rx.ReadFromUDPAddrPort(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue // resend
		}
		if err != nil {
			return false
		}
		if string(buf[:n]) != "hello" || from.Addr() != f.Addr(0, p) {
			t.Fatalf("plane %d: got %q from %v", p, buf[:n], from)
		}
		return true
	}
	return false
}

func TestReachEachPlaneAndLinkDown(t *testing.T) {
	f := start(t, Config{Hosts: 2, Planes: make([]PlaneConfig, 3), MTU: 9000})
	ctx := testenv.Context(t)
	for p := range 3 {
		if !echoWithin(t, f, p, 5*time.Second) {
			t.Fatalf("plane %d: no datagram across", p)
		}
	}
	out, err := f.Exec(ctx, 0, "ip", "-o", "link", "show", "dev", "p1")
	if err != nil || !contains(out, "mtu 9000") {
		t.Fatalf("mtu: %s %v", out, err)
	}
	out, err = f.Exec(ctx, 0, "ethtool", "-k", "p1")
	if err != nil || !contains(out, "generic-receive-offload: off") || !contains(out, "tcp-segmentation-offload: off") {
		t.Fatalf("offloads: %s %v", out, err)
	}
	if err := f.SetLinkUp(ctx, 1, 1, false); err != nil {
		t.Fatal(err)
	}
	if echoWithin(t, f, 1, 300*time.Millisecond) {
		t.Fatal("datagram crossed a down link")
	}
	if !echoWithin(t, f, 0, 5*time.Second) {
		t.Fatal("plane 0 affected by plane 1's link")
	}
	if err := f.SetLinkUp(ctx, 1, 1, true); err != nil {
		t.Fatal(err)
	}
	// The link needs a moment to come back (carrier); poll with a deadline.
	deadline := time.Now().Add(10 * time.Second)
	for !echoWithin(t, f, 1, 200*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("link did not come back")
		}
	}
}

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }

func TestLossRuleDrops(t *testing.T) {
	const n, loss = 5000, 0.05
	f := start(t, Config{Hosts: 2, Planes: []PlaneConfig{{Loss: loss}}})
	ctx := testenv.Context(t)
	rx := udpIn(t, f, 1, netip.AddrPortFrom(f.Addr(1, 0), 0))
	tx := udpIn(t, f, 0, netip.AddrPortFrom(f.Addr(0, 0), 0))
	// Warm up ARP so the first datagrams are not held or lost there.
	if !echoWithin(t, f, 0, 5*time.Second) {
		t.Fatal("no connectivity")
	}
	before, err := f.LossDrops(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 256)
		for {
			_ = rx.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := rx.Read(buf); err != nil {
				return
			}
			got.Add(1)
		}
	}()
	dst := rx.LocalAddr().(*net.UDPAddr).AddrPort()
	for i := range n {
		if _, err := tx.WriteToUDPAddrPort(make([]byte, 100), dst); err != nil {
			t.Fatal(err)
		}
		if i%200 == 199 {
			// Keep the receiver within reach so only the rule drops.
			deadline := time.Now().Add(5 * time.Second)
			for got.Load() < int64(float64(i)*(1-loss)*0.9) && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond) // polling interval
			}
		}
	}
	<-done
	after, err := f.LossDrops(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	dropped := after - before
	t.Logf("sent %d, received %d, rule dropped %d", n, got.Load(), dropped)
	if uint64(got.Load())+dropped != n {
		t.Fatalf("received %d + dropped %d != sent %d", got.Load(), dropped, n)
	}
	if r := float64(dropped) / n; r < 0.035 || r > 0.065 {
		t.Fatalf("drop ratio %.4f, want ~%.2f", r, loss)
	}
	if err := f.SetLoss(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	if d, _ := f.LossDrops(ctx, 0); d != 0 {
		t.Fatalf("counter not reset: %d", d)
	}
}

func TestTBFLimitsThroughput(t *testing.T) {
	const rate = 50e6
	f := start(t, Config{Hosts: 2, Planes: []PlaneConfig{{RateBps: rate}}})
	ctx := testenv.Context(t)
	var ln net.Listener
	if err := f.Do(1, func() (err error) {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(f.Addr(1, 0), 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	type result struct {
		n   int64
		dur time.Duration
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			res <- result{err: err}
			return
		}
		defer c.Close()
		begin := time.Now()
		n, err := io.Copy(io.Discard, c)
		res <- result{n, time.Since(begin), err}
	}()
	var c net.Conn
	if err := f.Do(0, func() (err error) {
		c, err = net.DialTimeout("tcp4", ln.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	stop := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(stop) {
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	bps := float64(r.n*8) / r.dur.Seconds()
	t.Logf("TCP through tbf %v bit/s: %.1f Mbit/s (%d bytes in %v)", rate, bps/1e6, r.n, r.dur)
	if bps > rate*1.05 || bps < rate*0.75 {
		t.Fatalf("goodput %.1f Mbit/s, want ≤ %.0f and near it", bps/1e6, rate/1e6)
	}
	// The shaper towards the receiver carried every segment; the one
	// towards the sender only ACKs.
	toRecv, err := f.Shaper(ctx, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	toSend, err := f.Shaper(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("shaper towards the receiver %+v, towards the sender %+v", toRecv, toSend)
	if min := uint64(r.n) / 1500; toRecv.Packets < min || toSend.Packets == 0 || toSend.Packets >= toRecv.Packets {
		t.Fatalf("shaper counters %+v (receiver side) and %+v (sender side), want at least %d packets towards the receiver", toRecv, toSend, min)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{Hosts: 0, Planes: make([]PlaneConfig, 1)},
		{Hosts: 2},
		{Hosts: 2, Planes: []PlaneConfig{{Loss: 1.5}}},
		{Hosts: 2, Planes: make([]PlaneConfig, 1), Name: "bad name"},
	} {
		if _, err := Start(context.Background(), c); err == nil {
			t.Errorf("Start(%+v) succeeded", c)
		}
	}
}
