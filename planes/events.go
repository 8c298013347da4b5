package planes

import (
	"sync"
	"time"
)

// Subject kinds of events. SubjectHistory is the history itself (its
// gaps), subject "events".
const (
	SubjectLink    = "link"
	SubjectSwitch  = "switch"
	SubjectPlane   = "plane"
	SubjectHistory = "history"
)

// Kinds of events: a health transition, and a gap in the history (events
// that were lost before they could be recorded; evidence "lost" counts them).
const (
	EventStateChange = "state_change"
	EventHistoryGap  = "history_gap"
)

// Event is something that happened to a subject, such as a state change.
type Event struct {
	ID          int64          `json:"id,omitempty"`
	At          time.Time      `json:"at"`
	SubjectKind string         `json:"subject_kind"`
	Subject     string         `json:"subject"`
	Kind        string         `json:"kind"`
	From        string         `json:"from,omitempty"`
	To          string         `json:"to,omitempty"`
	Reason      string         `json:"reason"`
	Evidence    map[string]any `json:"evidence,omitempty"`
}

// Bus fans events out to in-process subscribers (policy, the event writer,
// the dashboard stream).
//
// The contract:
//   - Publish never blocks, whatever the subscribers do: the health engine
//     publishes from its own loop and must not wait for a database.
//   - Every subscriber sees events in publish order (Publish calls are
//     serialized), minus the ones it lost.
//   - A plain subscription (Subscribe) has a channel buffer; when a
//     subscriber falls behind by more than that buffer, newer events are
//     dropped for it alone and its Dropped count rises. Fit for views that
//     can resynchronize (the dashboard stream, recomputation triggers).
//   - A queued subscription (SubscribeQueued) is for a subscriber that must
//     not lose events (the history writer): besides its channel it holds
//     up to limit events in a queue that a goroutine of its own drains into
//     the channel as the subscriber reads. It loses events only when more
//     than limit are waiting, and counts them in Dropped, so the subscriber
//     can record the gap.
type Bus struct {
	mu   sync.Mutex
	subs map[*Subscription]struct{}
}

// Subscription receives events on C until Close.
type Subscription struct {
	C       <-chan Event
	c       chan Event
	bus     *Bus
	mu      sync.Mutex
	dropped uint64
	closed  bool

	// Queued subscriptions only: events accepted but not yet sent on c.
	limit int
	queue []Event
	held  int // events in queue plus those the forwarder is sending
	wake  chan struct{}
	done  chan struct{}
	exit  chan struct{}
}

// NewBus returns an empty bus.
func NewBus() *Bus { return &Bus{subs: map[*Subscription]struct{}{}} }

// Subscribe returns a subscription with the given buffer; beyond it, events
// are dropped for this subscriber and counted in Dropped.
func (b *Bus) Subscribe(buffer int) *Subscription {
	c := make(chan Event, buffer)
	s := &Subscription{C: c, c: c, bus: b}
	b.mu.Lock()
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	return s
}

// SubscribeQueued returns a subscription that holds up to limit events
// beyond its channel buffer without blocking Publish, and drops (counting in
// Dropped) only beyond that. Close it to stop its forwarding goroutine.
func (b *Bus) SubscribeQueued(buffer, limit int) *Subscription {
	c := make(chan Event, buffer)
	s := &Subscription{C: c, c: c, bus: b, limit: max(limit, 1),
		wake: make(chan struct{}, 1), done: make(chan struct{}), exit: make(chan struct{})}
	go s.forward()
	b.mu.Lock()
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	return s
}

// Publish delivers events to every subscriber without blocking.
func (b *Bus) Publish(events ...Event) {
	if len(events) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		if s.limit > 0 {
			s.enqueue(events)
			continue
		}
		for _, e := range events {
			select {
			case s.c <- e:
			default:
				s.mu.Lock()
				s.dropped++
				s.mu.Unlock()
			}
		}
	}
}

func (s *Subscription) enqueue(events []Event) {
	s.mu.Lock()
	n := min(len(events), s.limit-s.held)
	s.queue = append(s.queue, events[:n]...)
	s.held += n
	s.dropped += uint64(len(events) - n)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// forward moves queued events into the channel, in order, until Close.
func (s *Subscription) forward() {
	defer close(s.exit)
	for {
		s.mu.Lock()
		batch := s.queue
		s.queue = nil
		s.mu.Unlock()
		for _, e := range batch {
			select {
			case s.c <- e:
			case <-s.done:
				return
			}
			s.mu.Lock()
			s.held--
			s.mu.Unlock()
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-s.wake:
		case <-s.done:
			return
		}
	}
}

// Dropped is how many events this subscriber missed: for a full buffer
// (Subscribe) or a full queue (SubscribeQueued).
func (s *Subscription) Dropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// Close unsubscribes and closes C. Events of a queued subscription not yet
// in C are discarded.
func (s *Subscription) Close() {
	s.bus.mu.Lock()
	if s.closed {
		s.bus.mu.Unlock()
		return
	}
	s.closed = true
	delete(s.bus.subs, s)
	s.bus.mu.Unlock()
	if s.done != nil {
		close(s.done)
		<-s.exit
	}
	close(s.c)
}
