package congestion

import (
	"sync"
	"time"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// Shared is one path's congestion state shared by every connection between
// the same two endpoints that uses the path: one window, over the bytes all
// of them have in flight, so the data in flight is bounded by what the path
// carries however many connections there are, and a new connection joins
// the established window instead of adding an initial one. Members report
// their bytes in flight with AddInFlight; the SendAlgorithm methods are
// safe for concurrent use.
//
// One member's retransmission timeout while others are being acknowledged
// on the path is that member's loss, not a dead path: it counts as a loss.
type Shared struct {
	mu        sync.Mutex
	cc        *DelayAIMD
	rtt       *RTTStats
	inFlight  protocol.ByteCount
	lastAck   time.Time
	delivered time.Time // latest send time of a packet acknowledged
	collapsed bool      // the last timeout collapsed the window
}

var _ SendAlgorithm = (*Shared)(nil)

// NewShared returns shared state over a DelayAIMD reading rtt.
func NewShared(cfg DelayAIMDConfig, rtt *RTTStats) *Shared {
	return &Shared{cc: NewDelayAIMD(cfg, rtt), rtt: rtt}
}

// AddInFlight adds delta (negative when bytes leave flight) to the bytes
// the members have in flight.
func (s *Shared) AddInFlight(delta protocol.ByteCount) {
	s.mu.Lock()
	s.inFlight += delta
	s.mu.Unlock()
}

// OnDelivered records that a member's packet sent at sent was acknowledged.
func (s *Shared) OnDelivered(sent time.Time) {
	s.mu.Lock()
	if sent.After(s.delivered) {
		s.delivered = sent
	}
	s.mu.Unlock()
}

// DeliveredSent returns the latest send time of a packet acknowledged.
func (s *Shared) DeliveredSent() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delivered
}

// InFlight returns the bytes all members have in flight.
func (s *Shared) InFlight() protocol.ByteCount {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight
}

// Snapshot returns the window and the members' bytes in flight, read together.
func (s *Shared) Snapshot() (window, inFlight protocol.ByteCount) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cc.CongestionWindow(), s.inFlight
}

// OnPacketSent implements SendAlgorithm.
func (s *Shared) OnPacketSent(time.Time, protocol.ByteCount, protocol.ByteCount) {}

// OnPacketAcked implements SendAlgorithm; the members' total counts, not
// the member's own bytes in flight.
func (s *Shared) OnPacketAcked(now time.Time, acked, _ protocol.ByteCount) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastAck = now
	s.cc.OnPacketAcked(now, acked, s.inFlight+acked)
}

// OnPacketLost implements SendAlgorithm.
func (s *Shared) OnPacketLost(now time.Time, lost, _ protocol.ByteCount) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cc.OnPacketLost(now, lost, s.inFlight+lost)
}

// OnECN implements SendAlgorithm.
func (s *Shared) OnECN(now time.Time, marked int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cc.OnECN(now, marked)
}

// OnRetransmissionTimeout implements SendAlgorithm: the window collapses
// only when nothing on the path was acknowledged within an RTO.
func (s *Shared) OnRetransmissionTimeout(now time.Time) {
	rto := s.rtt.RTO()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.lastAck.IsZero() && now.Sub(s.lastAck) < rto {
		s.cc.OnPacketLost(now, s.cc.cfg.MSS, s.inFlight)
		return
	}
	s.collapsed = true
	s.cc.OnRetransmissionTimeout(now)
}

// OnSpuriousTimeout implements SendAlgorithm.
func (s *Shared) OnSpuriousTimeout(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.collapsed {
		s.collapsed = false
		s.cc.OnSpuriousTimeout(now)
	}
}

// CanSend implements SendAlgorithm over the members' total in flight (its
// argument, a member's own, is ignored).
func (s *Shared) CanSend(protocol.ByteCount) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cc.CanSend(s.inFlight)
}

// CongestionWindow implements SendAlgorithm.
func (s *Shared) CongestionWindow() protocol.ByteCount {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cc.CongestionWindow()
}

// PacingRate implements SendAlgorithm.
func (s *Shared) PacingRate() protocol.Rate {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cc.PacingRate()
}

// InSlowStart implements SendAlgorithm.
func (s *Shared) InSlowStart() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cc.InSlowStart()
}

// LossRate returns the path's smoothed loss rate.
func (s *Shared) LossRate() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cc.LossRate()
}
