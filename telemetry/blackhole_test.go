package telemetry

import (
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// freezer is a TCP proxy that can stop forwarding in both directions
// without closing anything: the connection stays open and silent, like a
// switch that lost power or a path that black-holes (no FIN, no RST, no
// answer to HTTP/2 pings).
type freezer struct {
	lis    net.Listener
	target string

	mu     sync.Mutex
	cond   *sync.Cond
	frozen bool
	closed bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{lis: lis, target: target}
	f.cond = sync.NewCond(&f.mu)
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

func (f *freezer) addr() string { return f.lis.Addr().String() }

func (f *freezer) accept() {
	defer f.wg.Done()
	for {
		c, err := f.lis.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", f.target)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			c.Close()
			up.Close()
			return
		}
		f.conns = append(f.conns, c, up)
		f.mu.Unlock()
		f.wg.Add(2)
		go f.pipe(up, c)
		go f.pipe(c, up)
	}
}

func (f *freezer) pipe(dst, src net.Conn) {
	defer f.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			f.mu.Lock()
			for f.frozen && !f.closed {
				f.cond.Wait()
			}
			closed := f.closed
			f.mu.Unlock()
			if closed {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				dst.Close()
			}
			return
		}
	}
}

func (f *freezer) freeze(on bool) {
	f.mu.Lock()
	f.frozen = on
	f.cond.Broadcast()
	f.mu.Unlock()
}

func (f *freezer) close() {
	f.mu.Lock()
	f.closed = true
	f.cond.Broadcast()
	conns := f.conns
	f.mu.Unlock()
	f.lis.Close()
	for _, c := range conns {
		c.Close()
	}
	f.wg.Wait()
}

// TestBlackholedConnectionDetected: the TCP connection goes silent with no
// FIN; the collector notices within the silence timeout and reconnects by
// itself once the path heals.
func TestBlackholedConnectionDetected(t *testing.T) {
	sw, _ := startSwitch(t, "sw1", 2)
	fz := startFreezer(t, sw.Addr())
	topo := topologyFor(map[string]string{"sw1": fz.addr()}, 2)
	cfg := fastConfig()
	cfg.ConnectTimeout = 500 * time.Millisecond
	h := startCollector(t, cfg, topo, nil)
	h.waitReach(t, 0, "synced", synced)
	h.waitRates(t, 0, 2)

	_, nr := h.rec.mark()
	fz.freeze(true)
	frozen := time.Now()
	r := h.waitReach(t, nr, "unreachable", unreached)
	took := time.Since(frozen)
	t.Logf("black-holed connection detected after %v (silence timeout %v): %s", took, silence, r.Reason)
	if !strings.Contains(r.Reason, "silent") || took > silence+500*time.Millisecond {
		t.Errorf("took %v, reason %q", took, r.Reason)
	}
	_, nr = h.rec.mark()
	fz.freeze(false)
	h.waitReach(t, nr, "synced after the path heals", synced)
	checkNoFalseAlarm(t, h.rec.samplesSince(0))
}
