package planes

import (
	"sync"
	"time"
)

// Subject kinds of events.
const (
	SubjectLink   = "link"
	SubjectSwitch = "switch"
	SubjectPlane  = "plane"
)

// EventStateChange is the kind of a health transition event.
const EventStateChange = "state_change"

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
// the dashboard stream). Publishing never blocks: a subscriber that falls
// behind its buffer loses events and sees its Dropped count rise.
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
}

// NewBus returns an empty bus.
func NewBus() *Bus { return &Bus{subs: map[*Subscription]struct{}{}} }

// Subscribe returns a subscription with the given buffer.
func (b *Bus) Subscribe(buffer int) *Subscription {
	c := make(chan Event, buffer)
	s := &Subscription{C: c, c: c, bus: b}
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

// Dropped is how many events this subscriber missed for a full buffer.
func (s *Subscription) Dropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// Close unsubscribes and closes C.
func (s *Subscription) Close() {
	s.bus.mu.Lock()
	defer s.bus.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	delete(s.bus.subs, s)
	close(s.c)
}
