package transport

import (
	"runtime"
	"testing"
	"time"

	"github.com/multiplane/multiplane/internal/testenv"
)

// heapBytes returns the live heap after a collection.
func heapBytes() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// State scales with connections: the goroutines of two transports do not
// grow with the connections between them, and an idle connection costs at
// most 16 KiB of heap on each side.
func TestStateScalesWithConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("dials 4,000 connections; not in -short")
	}
	few, many := 100, 4000
	if raceEnabled { // the race detector makes every dial and byte dearer
		many = 1000
	}
	ctx := testenv.Context(t)
	a := listenT(t, Config{Local: loopbackAddrs(2), AcceptBacklog: many})
	b := listenT(t, Config{Local: loopbackAddrs(2), AcceptBacklog: many})
	var held []*Conn
	dial := func(n int) {
		for len(held) < 2*n {
			x, y := pair(t, ctx, a, b, b.LocalAddrs())
			held = append(held, x, y)
		}
	}
	settle := func() { time.Sleep(200 * time.Millisecond) } // handshakes' last ACKs
	dial(few)
	settle()
	g0, h0 := runtime.NumGoroutine(), heapBytes()
	start := time.Now()
	dial(many)
	t.Logf("dialed %d more connections in %v", many-few, time.Since(start).Round(time.Millisecond))
	settle()
	g1, h1 := runtime.NumGoroutine(), heapBytes()
	perConn := float64(h1-h0) / float64(2*(many-few))
	t.Logf("goroutines: %d at %d connections, %d at %d; heap per idle connection (each side) %.1f KiB",
		g0, few, g1, many, perConn/1024)
	if g1 > g0+2 {
		t.Errorf("goroutines grew from %d to %d with %d more connections", g0, g1, many-few)
	}
	if perConn > 16<<10 && !raceEnabled {
		t.Errorf("an idle connection holds %.1f KiB; want at most 16 KiB", perConn/1024)
	}
	runtime.KeepAlive(held)
}
