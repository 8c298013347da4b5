package planes

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/multiplane/multiplane/internal/testutil"
)

func events(from, n int) []Event {
	evs := make([]Event, n)
	for i := range evs {
		evs[i] = Event{Subject: fmt.Sprint(from + i), Kind: EventStateChange}
	}
	return evs
}

// recv takes the next event, failing the test rather than hanging.
func recv(t *testing.T, s *Subscription) Event {
	t.Helper()
	select {
	case e := <-s.C:
		return e
	case <-time.After(5 * time.Second):
		t.Fatalf("no event within 5s (dropped %d)", s.Dropped())
		return Event{}
	}
}

func TestBusPlainSubscriberDropsBeyondBuffer(t *testing.T) {
	b := NewBus()
	s := b.Subscribe(4)
	defer s.Close()
	b.Publish(events(0, 10)...)
	if d := s.Dropped(); d != 6 {
		t.Fatalf("Dropped = %d, want 6", d)
	}
	for i := 0; i < 4; i++ {
		if e := recv(t, s); e.Subject != fmt.Sprint(i) {
			t.Fatalf("event %d = %s: want publish order, oldest kept", i, e.Subject)
		}
	}
}

// A queued subscriber that is not reading loses nothing up to its limit,
// gets everything in order once it reads, and never blocks Publish.
func TestBusQueuedSubscriberKeepsOrderAndCountsOverflow(t *testing.T) {
	defer goleak.VerifyNone(t)
	b := NewBus()
	s := b.SubscribeQueued(2, 1000)
	slow := b.Subscribe(2) // others keep their behaviour
	defer slow.Close()
	done := make(chan struct{})
	go func() {
		for i := 0; i < 100; i++ {
			b.Publish(events(i*10, 10)...)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Publish blocked on a subscriber that does not read")
	}
	for i := 0; i < 1000; i++ {
		if e := recv(t, s); e.Subject != fmt.Sprint(i) {
			t.Fatalf("event %d = %s, want %d", i, e.Subject, i)
		}
	}
	if d := s.Dropped(); d != 0 {
		t.Fatalf("queued subscriber dropped %d within its limit", d)
	}
	if d := slow.Dropped(); d != 998 {
		t.Fatalf("plain subscriber dropped %d, want 998", d)
	}

	// Beyond the limit: counted, and the events kept are the oldest.
	testutil.WaitFor(t, 5*time.Second, "the queue to empty", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.held == 0
	})
	b.Publish(events(0, 1500)...)
	got := 0
	for got < 1000 {
		e := recv(t, s)
		if e.Subject != fmt.Sprint(got) {
			t.Fatalf("event %d = %s", got, e.Subject)
		}
		got++
	}
	if d := s.Dropped(); d != 500 {
		t.Fatalf("Dropped = %d, want 500 (limit 1000)", d)
	}
	s.Close()
	s.Close()
	if _, ok := <-s.C; ok {
		t.Fatal("C still open after Close")
	}
	b.Publish(events(0, 1)...) // after Close: no panic, no delivery
}
