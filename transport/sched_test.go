package transport

import (
	"fmt"
	"testing"
	"time"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// A connection woken for a turn in a shared window runs before the
// connections already waiting in the ready queue, once, and the ready
// queue keeps its order.
func TestWorkerRunsTurnHeadsFirst(t *testing.T) {
	_, _, ps, ran := turnsFixture(5)
	for _, p := range ps[:4] {
		p.conn.wakeSender()
	}
	ps[4].conn.wakeForTurn()
	ps[2].conn.wakeForTurn() // already in the ready queue
	ps[2].conn.wakeForTurn()
	if got, want := ran(), "[4 2 0 1 3]"; got != want {
		t.Fatalf("ran %s, want %s", got, want)
	}
}

// A connection whose retransmission the full window holds back is woken by
// the next room in the window, one per room and first come first served,
// beside the head of the turns (retransmissions take no turn).
func TestRoomWakesWaitingResends(t *testing.T) {
	_, sp, ps, woken := turnsFixture(3)
	sp.waitToResend(ps[1])
	sp.waitToResend(ps[2])
	sp.waitToResend(ps[1]) // already waiting
	for _, want := range []string{"[1]", "[2]", "[]"} {
		sp.offer()
		if got := woken(); got != want {
			t.Fatalf("room woke %s, want %s", got, want)
		}
	}
}

// turnsFixture is a shared path with n connections' paths on one worker.
func turnsFixture(n int) (*worker, *sharedPath, []*path, func() string) {
	w := &worker{kick: make(chan struct{}, 1)}
	sp := &sharedPath{}
	ps := make([]*path, n)
	for i := range ps {
		c := &Conn{id: protocol.ConnectionID(i)}
		c.sched.index = -1
		c.sched.w.Store(w)
		ps[i] = &path{conn: c, shared: sp}
	}
	woken := func() string {
		var ids []uint32
		w.mu.Lock()
		for c := w.next(); c != nil; c = w.next() {
			c.sched.queued, c.sched.urgent = false, false
			ids = append(ids, uint32(c.id))
		}
		w.mu.Unlock()
		return fmt.Sprint(ids)
	}
	return w, sp, ps, woken
}

// The head of the turns is woken when the window and the pacer both let a
// datagram out; while the pacer holds the path back its own pacing
// deadline wakes it, and connections behind it do not wake for the pacer.
// An ACK's room wakes the head only when the window held someone back.
func TestTurnsWakeHeadOnlyWhenItCanSend(t *testing.T) {
	_, sp, ps, woken := turnsFixture(3)
	now := time.Unix(1, 0)
	a, b := ps[0], ps[1]
	if sp.admit(a, false, true, now) {
		t.Fatal("admitted with the window full")
	}
	if sp.admit(b, true, false, now) {
		t.Fatal("admitted with the pacer empty")
	}
	if got := woken(); got != "[]" {
		t.Fatalf("the pacer's refusal woke %s", got)
	}
	if sp.waitsTurn(a, now) || !sp.waitsTurn(b, now) {
		t.Fatalf("waitsTurn: head %v, behind it %v", sp.waitsTurn(a, now), sp.waitsTurn(b, now))
	}
	if sp.admit(b, true, true, now) {
		t.Fatal("admitted behind the head")
	}
	if got := woken(); got != "[0]" {
		t.Fatalf("room for the head woke %s, want [0]", got)
	}
	for _, want := range []string{"[0]", "[]"} { // the window held a back, then nobody
		sp.offer()
		if got := woken(); got != want {
			t.Fatalf("an ACK's room woke %s, want %s", got, want)
		}
	}
}

// A connection alone in the queue (it queued for the pacer) is not
// contended: its sends arm no loss timer for others' evidence.
func TestTurnsContendedOnlyWithOthers(t *testing.T) {
	_, sp, ps, _ := turnsFixture(2)
	now := time.Unix(1, 0)
	sp.admit(ps[0], true, false, now)
	if sp.used(ps[0], 100, 1500, now) {
		t.Fatal("alone in the queue, yet contended")
	}
	sp.admit(ps[1], true, false, now)
	if !sp.used(ps[0], 100, 1500, now) || !sp.used(ps[1], 100, 1500, now) {
		t.Fatal("two in the queue, not contended")
	}
}
