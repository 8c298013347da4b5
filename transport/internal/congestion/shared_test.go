package congestion

import (
	"testing"
	"time"
)

// The members' bytes in flight count against one window; a member's
// timeout collapses it only when nothing on the path was acknowledged
// within an RTO, and only a timeout that collapsed it is undone.
func TestSharedWindow(t *testing.T) {
	const mss = 1000
	rtt := NewRTTStats()
	s := NewShared(DefaultDelayAIMDConfig(mss), rtt)
	w := s.CongestionWindow()
	s.AddInFlight(w - mss) // two members' worth, just under the window
	if !s.CanSend(0) {
		t.Fatal("cannot send under the window")
	}
	s.AddInFlight(mss)
	if s.CanSend(0) {
		t.Fatal("can send at the window whatever one member has in flight")
	}

	now := time.Unix(1000, 0)
	rtt.Update(now, time.Millisecond, 0)
	s.OnPacketAcked(now, mss, 0)
	before := s.CongestionWindow()
	s.OnRetransmissionTimeout(now.Add(time.Millisecond)) // another member was just acknowledged
	if got := s.CongestionWindow(); got < before/2 {
		t.Fatalf("a member's timeout while the path is acknowledged collapsed the window %d -> %d", before, got)
	}
	s.OnSpuriousTimeout(now.Add(2 * time.Millisecond))
	if got := s.CongestionWindow(); got > before {
		t.Fatalf("an undo without a collapse grew the window %d -> %d", before, got)
	}
	s.OnRetransmissionTimeout(now.Add(time.Second)) // nothing acknowledged for an RTO
	if got := s.CongestionWindow(); got != 2*mss {
		t.Fatalf("a timeout of a silent path left the window at %d, want the minimum %d", got, 2*mss)
	}
	s.OnSpuriousTimeout(now.Add(time.Second + time.Millisecond))
	if got := s.CongestionWindow(); got <= 2*mss {
		t.Fatal("a spurious collapse was not undone")
	}
}
