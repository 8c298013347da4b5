package ackhandler

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/multiplane/multiplane/transport/internal/congestion"
	"github.com/multiplane/multiplane/transport/internal/protocol"
	"github.com/multiplane/multiplane/transport/internal/wire"
)

type recorder struct {
	acked, lost map[Ref]int
	spurious    int
}

func newRecorder() *recorder { return &recorder{acked: map[Ref]int{}, lost: map[Ref]int{}} }

func (r *recorder) OnAcked(ref Ref, _ protocol.ByteCount, wasLost bool) {
	r.acked[ref]++
	if wasLost {
		r.spurious++
	}
}
func (r *recorder) OnLost(ref Ref, _ protocol.ByteCount) { r.lost[ref]++ }

func newPath() *SentPath {
	rtt := congestion.NewRTTStats()
	cfg := congestion.DefaultDelayAIMDConfig(1000)
	cfg.InitialWindow = 1 << 30
	return NewSentPath(1, rtt, congestion.NewDelayAIMD(cfg, rtt))
}

// newSharedPath returns a path whose window is shared (with no other
// member yet), the shared state and its RTT estimate.
func newSharedPath() (*SentPath, *congestion.Shared, *congestion.RTTStats) {
	rtt := congestion.NewRTTStats()
	shared := congestion.NewShared(congestion.DefaultDelayAIMDConfig(1000), rtt)
	p := NewSentPath(1, rtt, shared)
	p.Shared = shared
	return p, shared, rtt
}

func TestSackLossDetection(t *testing.T) {
	for _, lossRate := range []float64{0, 0.01, 0.1, 0.5} {
		rng := rand.New(rand.NewPCG(1, 2))
		p := newPath()
		p.ReorderThreshold = 1
		var rp ReceivedPath
		rec := newRecorder()
		now := time.Unix(0, 0)
		dropped := map[Ref]bool{}
		const n = 5000
		var blk wire.PathAck
		for i := 0; i < n; i++ {
			now = now.Add(time.Microsecond)
			pn := p.OnSent(now, Ref(i), 1000)
			if rng.Float64() < lossRate && i < n-1 { // keep the last so no tail loss
				dropped[Ref(i)] = true
			} else {
				rp.OnPacket(pn, false, time.Time{})
			}
			if i%7 == 0 || i == n-1 {
				rp.FillAck(1, 4, time.Time{}, &blk)
				p.OnAck(now, &blk, 0, rec)
			}
		}
		for i := 0; i < n; i++ {
			ref := Ref(i)
			if dropped[ref] {
				if rec.lost[ref] != 1 || rec.acked[ref] != 0 {
					t.Fatalf("loss %v: dropped %d: lost %d acked %d", lossRate, i, rec.lost[ref], rec.acked[ref])
				}
			} else if rec.acked[ref] != 1 || rec.lost[ref] != 0 {
				t.Fatalf("loss %v: delivered %d: acked %d lost %d", lossRate, i, rec.acked[ref], rec.lost[ref])
			}
		}
		if p.BytesInFlight() != 0 {
			t.Fatalf("in flight %d", p.BytesInFlight())
		}
	}
}

func TestReorderThresholdAndSpurious(t *testing.T) {
	p := newPath()
	p.ReorderThreshold = 3
	var rp ReceivedPath
	rec := newRecorder()
	now := time.Unix(0, 0)
	var blk wire.PathAck
	for i := 0; i < 6; i++ {
		p.OnSent(now, Ref(i), 1000)
	}
	for _, pn := range []protocol.PacketNumber{0, 2, 3} { // 1 is late
		rp.OnPacket(pn, false, time.Time{})
	}
	rp.FillAck(1, 4, time.Time{}, &blk)
	p.OnAck(now, &blk, 0, rec)
	if len(rec.lost) != 0 {
		t.Fatalf("declared lost below threshold: %v", rec.lost)
	}
	rp.OnPacket(4, true, time.Time{})
	rp.FillAck(1, 4, time.Time{}, &blk)
	p.OnAck(now, &blk, 0, rec)
	if rec.lost[1] != 1 {
		t.Fatalf("packet 1 not lost at threshold: %v", rec.lost)
	}
	rp.OnPacket(1, false, time.Time{}) // arrives late: spurious
	rp.OnPacket(5, false, time.Time{})
	rp.FillAck(1, 4, time.Time{}, &blk)
	if blk.Cumulative != 6 || blk.ECNCE != 1 {
		t.Fatalf("ack block %+v", blk)
	}
	p.OnAck(now, &blk, 0, rec)
	if rec.spurious != 1 || p.Stats().SpuriousLosses != 1 || p.Stats().ECNMarks != 1 {
		t.Fatalf("spurious %d stats %+v", rec.spurious, p.Stats())
	}
}

func TestTimeoutBackoff(t *testing.T) {
	p := newPath()
	rec := newRecorder()
	now := time.Unix(0, 0)
	p.OnSent(now, 1, 1000)
	p.OnSent(now, 2, 1000)
	d1 := p.RTODeadline()
	if p.OnTimeout(d1.Add(-time.Nanosecond), rec) != 0 {
		t.Fatal("fired early")
	}
	if n := p.OnTimeout(d1, rec); n != 2 || p.BytesInFlight() != 0 {
		t.Fatalf("timeout declared %d lost", n)
	}
	p.OnSent(d1, 3, 1000)
	if got, want := p.RTODeadline().Sub(d1), 2*p.RTT.RTO(); got != want {
		t.Fatalf("backoff %v, want %v", got, want)
	}
	if p.ConsecutiveTimeouts() != 1 {
		t.Fatal("consecutive timeouts")
	}
	// Packet 0 (declared lost by the timeout) is acknowledged after all:
	// the timeout was spurious and the window comes back.
	var rp ReceivedPath
	rp.OnPacket(0, false, time.Time{})
	var blk wire.PathAck
	rp.FillAck(1, 4, time.Time{}, &blk)
	p.OnAck(d1, &blk, 0, rec)
	if st := p.Stats(); st.SpuriousTimeouts != 1 || st.CongestionWindow != 1<<30 || p.ConsecutiveTimeouts() != 0 {
		t.Fatalf("after spurious timeout: %+v", st)
	}
}

func TestReceivedWindowBeyondHole(t *testing.T) {
	var rp ReceivedPath
	// Packet 0 never arrives (resent elsewhere); the window keeps moving.
	for pn := protocol.PacketNumber(1); pn < 2000; pn++ {
		rp.OnPacket(pn, false, time.Time{})
	}
	var blk wire.PathAck
	rp.FillAck(3, 4, time.Time{}, &blk)
	if blk.Cumulative != 0 || blk.Largest != 1999 {
		t.Fatalf("%+v", blk)
	}
	for pn := protocol.PacketNumber(1999 - 256); pn <= 1999; pn++ {
		if r, k := blk.Received(pn); !r || !k {
			t.Fatalf("pn %d not acknowledged", pn)
		}
	}
}

func TestGoBackN(t *testing.T) {
	p := newPath()
	rec := newRecorder()
	now := time.Unix(0, 0)
	var g InOrder
	for i := 0; i < 5; i++ {
		pn := p.OnSent(now, Ref(i), 1000)
		if pn == 2 {
			continue // lost
		}
		acc, nak := g.OnPacket(pn, time.Time{})
		if acc != (pn < 2) || nak != (pn == 3) {
			t.Fatalf("pn %d accept %v nak %v", pn, acc, nak)
		}
	}
	p.OnCumulativeAck(now, g.Expected, 0, rec)
	refs := p.Rewind(now, nil)
	if len(refs) != 3 || refs[0] != 2 || p.NextPacketNumber() != 2 {
		t.Fatalf("rewind %v next %d", refs, p.NextPacketNumber())
	}
	for _, r := range refs {
		pn := p.OnSent(now, r, 1000)
		if acc, _ := g.OnPacket(pn, time.Time{}); !acc {
			t.Fatalf("resent pn %d refused", pn)
		}
	}
	p.OnCumulativeAck(now, g.Expected, 0, rec)
	for i := 0; i < 5; i++ {
		if rec.acked[Ref(i)] != 1 {
			t.Fatalf("ref %d acked %d", i, rec.acked[Ref(i)])
		}
	}
}

func TestTimeBasedLoss(t *testing.T) {
	p := newPath()
	p.ReorderThreshold = 3
	var rp ReceivedPath
	rec := newRecorder()
	now := time.Unix(0, 0)
	for i := 0; i < 3; i++ {
		p.OnSent(now, Ref(i), 1000)
	}
	rp.OnPacket(0, false, time.Time{})
	rp.OnPacket(2, false, time.Time{}) // 1 is missing, only one packet after it
	var blk wire.PathAck
	rp.FillAck(1, 4, time.Time{}, &blk)
	p.OnAck(now.Add(100*time.Microsecond), &blk, 0, rec)
	if len(rec.lost) != 0 || p.LossTime().IsZero() {
		t.Fatalf("lost %v, loss time %v", rec.lost, p.LossTime())
	}
	if p.OnLossTimer(p.LossTime().Add(-time.Nanosecond), rec) != 0 {
		t.Fatal("loss timer fired early")
	}
	if n := p.OnLossTimer(p.LossTime(), rec); n != 1 || rec.lost[1] != 1 {
		t.Fatalf("loss timer declared %d lost: %v", n, rec.lost)
	}
	if d := p.RTODeadline(); !d.IsZero() {
		t.Fatalf("nothing in flight but RTO armed at %v", d)
	}
}

// The receiver reports how long it held each path's largest packet, and
// the sender's RTT sample leaves that and its own wait out of the fabric
// delay, from the block's largest packet only.
func TestAckDelayAndFabricRTT(t *testing.T) {
	t0 := time.Unix(100, 0)
	p := newPath()
	rec := newRecorder()
	var rp ReceivedPath
	for i := range 3 {
		pn := p.OnSent(t0, Ref(i), 1000)
		rp.OnPacket(pn, false, t0.Add(200*time.Microsecond)) // 200µs across the fabric
	}
	var blk wire.PathAck
	// The receiver's poll loop got to the packets 3ms after they arrived.
	rp.FillAck(1, 4, t0.Add(3200*time.Microsecond), &blk)
	if blk.AckDelay != 3*time.Millisecond || blk.Largest != 2 {
		t.Fatalf("block %+v, want ack delay 3ms for largest 2", blk)
	}
	// The ACK reaches the sender 100µs later and waits 1ms for its loop.
	now := t0.Add(4300 * time.Microsecond)
	p.OnAck(now, &blk, time.Millisecond+blk.AckDelay, rec)
	if got := p.RTT.Smoothed(); got != 4300*time.Microsecond {
		t.Errorf("smoothed RTT %v, want the whole 4.3ms", got)
	}
	if got := p.RTT.Min(); got != 300*time.Microsecond {
		t.Errorf("fabric RTT %v, want 300µs", got)
	}
	// A block that only fills a hole below an already acknowledged
	// largest gives no sample: its ack delay is not about that packet.
	p2 := newPath()
	var rp2 ReceivedPath
	pn0 := p2.OnSent(t0, 0, 1000)
	pn1 := p2.OnSent(t0, 1, 1000)
	rp2.OnPacket(pn1, false, t0.Add(time.Millisecond))
	rp2.FillAck(1, 4, t0.Add(time.Millisecond), &blk)
	p2.OnAck(t0.Add(2*time.Millisecond), &blk, 0, rec)
	rp2.OnPacket(pn0, false, t0.Add(9*time.Millisecond))
	rp2.FillAck(1, 4, t0.Add(9*time.Millisecond), &blk)
	p2.OnAck(t0.Add(10*time.Millisecond), &blk, 0, rec)
	if got := p2.RTT.Latest(); got != 2*time.Millisecond {
		t.Errorf("latest RTT %v after a hole was filled, want 2ms from the first ACK", got)
	}
	// go-back-N blocks carry the delay of the last in-order packet.
	var g InOrder
	g.OnPacket(0, t0)
	g.OnPacket(1, t0.Add(time.Millisecond))
	g.FillAck(1, t0.Add(1500*time.Microsecond), &blk)
	if blk.Cumulative != 2 || blk.AckDelay != 500*time.Microsecond {
		t.Errorf("go-back-N block %+v", blk)
	}
}

func TestReceivedNext(t *testing.T) {
	var rp ReceivedPath
	if rp.Next() != 0 {
		t.Fatalf("new path expects %d, want 0", rp.Next())
	}
	for _, c := range []struct{ pn, next protocol.PacketNumber }{
		{0, 1}, {3, 4}, {2, 4}, {1 << 24, 1<<24 + 1}, {5, 1<<24 + 1},
	} {
		rp.OnPacket(c.pn, false, time.Time{})
		if rp.Next() != c.next {
			t.Fatalf("after %d: Next %d, want %d", c.pn, rp.Next(), c.next)
		}
	}
}

// A packet whose own connection sent nothing after it is declared lost
// once the shared path delivered a packet sent later (by another
// connection) and the reordering window passed; while nothing sent after
// it was delivered it is left to the retransmission timer.
func TestLossSeenThroughSharedPath(t *testing.T) {
	p, shared, rtt := newSharedPath()
	rec := newRecorder()
	now := time.Unix(0, 0)
	rtt.Update(now, time.Millisecond, 0)
	p.OnSent(now, Ref(1), 1000)
	p.OnSent(now, Ref(2), 1000)
	p.ArmLossTimer(now, true) // other connections take turns on the path
	armed := p.LossTime()
	if armed.IsZero() {
		t.Fatal("no loss timer armed on a contended send")
	}
	// Nothing delivered after them: not lost, looked at again later.
	if n := p.OnLossTimer(armed, rec); n != 0 {
		t.Fatalf("declared %d lost with nothing sent after them delivered", n)
	}
	if !p.LossTime().After(armed) {
		t.Fatalf("loss timer %v not re-armed after %v", p.LossTime(), armed)
	}
	// Another connection's packet, sent 500 µs later, is delivered.
	shared.OnDelivered(now.Add(500 * time.Microsecond))
	if n := p.OnLossTimer(p.LossTime(), rec); n != 2 || rec.lost[1] != 1 || rec.lost[2] != 1 {
		t.Fatalf("declared %d lost (%v), want both", n, rec.lost)
	}
	if p.BytesInFlight() != 0 || shared.InFlight() != 0 {
		t.Fatalf("in flight %d (shared %d) after both were lost", p.BytesInFlight(), shared.InFlight())
	}
}

// A packet declared lost and acknowledged late by an ACK for a later
// packet says nothing of how long acknowledging takes (the ACK that covered
// it first may have been lost): it must not raise the shared path's RTO.
// Packets declared lost by a timeout and acknowledged late by the ACK their
// own arrival sent (a stall) do.
func TestSpuriousLossRaisesRTOOnlyByItsOwnAck(t *testing.T) {
	now := time.Unix(0, 0)
	late := now.Add(500 * time.Millisecond)
	// Two packets sent at now on a path with a 1 ms RTT.
	start := func() (*SentPath, *recorder, *ReceivedPath, *wire.PathAck) {
		p := newPath()
		p.RTT.Update(now, time.Millisecond, 0)
		p.OnSent(now, Ref(0), 1000)
		p.OnSent(now, Ref(1), 1000)
		return p, newRecorder(), new(ReceivedPath), new(wire.PathAck)
	}
	t.Run("covered by a later packet's ACK", func(t *testing.T) {
		p, rec, rp, blk := start()
		p.ReorderThreshold = 1
		rp.OnPacket(1, false, time.Time{})
		rp.FillAck(1, 4, time.Time{}, blk)
		p.OnAck(now.Add(time.Millisecond), blk, 0, rec)
		if rec.lost[0] != 1 {
			t.Fatalf("packet 0 not declared lost: %v", rec.lost)
		}
		p.OnSent(late.Add(-time.Millisecond), Ref(2), 1000)
		rp.OnPacket(0, false, time.Time{})
		rp.OnPacket(2, false, time.Time{})
		rp.FillAck(1, 4, time.Time{}, blk)
		p.OnAck(late, blk, 0, rec)
		if rec.spurious != 1 {
			t.Fatalf("%d spurious losses, want 1", rec.spurious)
		}
		if rto := p.RTT.RTO(); rto > 100*time.Millisecond {
			t.Errorf("RTO %v after a 500 ms old packet was acknowledged with a 1 ms old one", rto)
		}
	})
	t.Run("own ACK after a timeout", func(t *testing.T) {
		p, rec, rp, blk := start()
		if n := p.OnTimeout(p.RTODeadline(), rec); n != 2 {
			t.Fatalf("timeout declared %d lost", n)
		}
		rp.OnPacket(0, false, time.Time{})
		rp.OnPacket(1, false, time.Time{})
		rp.FillAck(1, 4, time.Time{}, blk)
		p.OnAck(late, blk, 0, rec)
		if rec.spurious != 2 {
			t.Fatalf("%d spurious losses, want 2", rec.spurious)
		}
		if rto := p.RTT.RTO(); rto < 500*time.Millisecond {
			t.Errorf("RTO %v after an ACK held up 500 ms", rto)
		}
	})
}

// Go-back-N: packets rewound and then acknowledged before they were resent
// leave flight once (the shared total does not go negative), and give no
// RTT sample: their send time is not the one the ACK answers.
func TestGoBackNRewindAccounting(t *testing.T) {
	p, shared, rtt := newSharedPath()
	rec := newRecorder()
	now := time.Unix(0, 0)
	rtt.Update(now, time.Millisecond, 0)
	for i := range 4 {
		p.OnSent(now, Ref(i), 1000)
	}
	p.Rewind(now.Add(10*time.Millisecond), nil)
	if p.BytesInFlight() != 0 || shared.InFlight() != 0 {
		t.Fatalf("after rewind: in flight %d, shared %d", p.BytesInFlight(), shared.InFlight())
	}
	// The first two arrived after all; the ACK comes before any resend.
	p.OnCumulativeAck(now.Add(900*time.Millisecond), 2, 0, rec)
	if p.BytesInFlight() != 0 || shared.InFlight() != 0 {
		t.Fatalf("after a cumulative ACK of rewound packets: in flight %d, shared %d", p.BytesInFlight(), shared.InFlight())
	}
	if rec.acked[0] != 1 || rec.acked[1] != 1 {
		t.Fatalf("acked %v", rec.acked)
	}
	if got := rtt.Smoothed(); got > 10*time.Millisecond {
		t.Fatalf("smoothed RTT %v after an ACK of rewound packets: took an ambiguous sample", got)
	}
	// Resent and acknowledged: a sample again, and nothing left in flight.
	at := now.Add(time.Second)
	for _, r := range []Ref{2, 3} {
		p.OnSent(at, r, 1000)
	}
	p.OnCumulativeAck(at.Add(2*time.Millisecond), 4, 0, rec)
	if p.BytesInFlight() != 0 || shared.InFlight() != 0 || rec.acked[3] != 1 {
		t.Fatalf("end: in flight %d, shared %d, acked %v", p.BytesInFlight(), shared.InFlight(), rec.acked)
	}
}

// A loss timer armed for packets that a timeout or the path's removal then
// declared lost must not stay due: the connection's worker ran it again and
// again (27 million turns in one 8 s run of 4,000 connections, a core lost).
func TestLossTimerDisarmedWithNothingInFlight(t *testing.T) {
	for _, end := range []string{"timeout", "removal"} {
		p, _, rtt := newSharedPath()
		rec := newRecorder()
		now := time.Unix(0, 0)
		rtt.Update(now, time.Millisecond, 0)
		p.OnSent(now, Ref(1), 1000)
		p.ArmLossTimer(now, true)
		if p.LossTime().IsZero() {
			t.Fatal("no loss timer armed on a contended send")
		}
		at := p.RTODeadline()
		if end == "timeout" {
			if n := p.OnTimeout(at, rec); n != 1 {
				t.Fatalf("timeout declared %d lost, want 1", n)
			}
		} else {
			p.AbandonAll(rec)
		}
		if lt := p.LossTime(); !lt.IsZero() {
			t.Errorf("after the %s: loss timer still armed at %v with nothing in flight", end, lt)
		}
		if n := p.OnLossTimer(at.Add(time.Second), rec); n != 0 {
			t.Errorf("after the %s: loss timer declared %d lost", end, n)
		}
	}
}

func TestLossesCountedByDetector(t *testing.T) {
	p, shared, rtt := newSharedPath()
	rec := newRecorder()
	now := time.Unix(0, 0)
	rtt.Update(now, time.Millisecond, 0)
	for i := range 8 {
		p.OnSent(now, Ref(i), 1000)
	}
	p.ArmLossTimer(now, true)
	// Packets 4 and 5 arrive: 0..2 have 3 later packets acknowledged (the
	// gap rule), 3 is lost by time, the reordering window having passed;
	// 6 and 7 are left for the shared path.
	var rp ReceivedPath
	for pn := protocol.PacketNumber(4); pn < 6; pn++ {
		rp.OnPacket(pn, false, time.Time{})
	}
	var blk wire.PathAck
	rp.FillAck(1, 4, time.Time{}, &blk)
	late := now.Add(10 * time.Millisecond)
	p.OnAck(late, &blk, 0, rec)
	// Another connection's packet sent after 6 and 7 is delivered.
	shared.OnDelivered(now.Add(time.Millisecond))
	p.OnLossTimer(late.Add(10*time.Millisecond), rec)
	// 0 arrives after all: the gap rule's loss was spurious.
	rp.OnPacket(0, false, time.Time{})
	rp.FillAck(1, 4, time.Time{}, &blk)
	p.OnAck(late.Add(11*time.Millisecond), &blk, 0, rec)
	got := p.Stats().ByDetector
	want := [Detectors]DetectorStats{ByGap: {Lost: 3, Spurious: 1}, ByTime: {Lost: 1}, ByShared: {Lost: 2}}
	if got != want {
		t.Fatalf("by detector %+v, want %+v", got, want)
	}
	if st := p.Stats(); st.PacketsLost != 6 || st.SpuriousLosses != 1 {
		t.Fatalf("lost %d spurious %d, want 6 and 1", st.PacketsLost, st.SpuriousLosses)
	}
}
