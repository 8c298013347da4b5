package transport

import (
	"fmt"
	"testing"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// A connection woken for a turn in a shared window runs before the
// connections already waiting in the ready queue, once, and the ready
// queue keeps its order.
func TestWorkerRunsTurnHeadsFirst(t *testing.T) {
	w := &worker{kick: make(chan struct{}, 1)}
	cs := make([]*Conn, 5)
	for i := range cs {
		cs[i] = &Conn{id: protocol.ConnectionID(i)}
		cs[i].sched.index = -1
		cs[i].sched.w.Store(w)
	}
	for _, c := range cs[:4] {
		c.wakeSender()
	}
	cs[4].wakeForTurn()
	cs[2].wakeForTurn() // already in the ready queue
	cs[2].wakeForTurn()
	var order []uint32
	w.mu.Lock()
	for c := w.next(); c != nil; c = w.next() {
		c.sched.queued, c.sched.urgent = false, false
		order = append(order, uint32(c.id))
	}
	w.mu.Unlock()
	want := []uint32{4, 2, 0, 1, 3}
	if len(order) != len(want) {
		t.Fatalf("ran %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("ran %v, want %v", order, want)
		}
	}
}

// A connection whose retransmission the full window holds back is woken by
// the next room in the window, one per room and first come first served,
// beside the head of the turns (retransmissions take no turn).
func TestRoomWakesWaitingResends(t *testing.T) {
	w := &worker{kick: make(chan struct{}, 1)}
	sp := &sharedPath{}
	ps := make([]*path, 3)
	for i := range ps {
		c := &Conn{id: protocol.ConnectionID(i)}
		c.sched.index = -1
		c.sched.w.Store(w)
		ps[i] = &path{conn: c, shared: sp}
	}
	sp.waitToResend(ps[1])
	sp.waitToResend(ps[2])
	sp.waitToResend(ps[1]) // already waiting
	woken := func() []uint32 {
		var ids []uint32
		w.mu.Lock()
		for c := w.next(); c != nil; c = w.next() {
			c.sched.queued, c.sched.urgent = false, false
			ids = append(ids, uint32(c.id))
		}
		w.mu.Unlock()
		return ids
	}
	for _, want := range []string{"[1]", "[2]", "[]"} {
		sp.offer()
		if got := fmt.Sprint(woken()); got != want {
			t.Fatalf("room woke %s, want %s", got, want)
		}
	}
}
