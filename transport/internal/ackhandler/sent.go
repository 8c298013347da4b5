// Package ackhandler tracks packets per path on both sides of a
// connection: on the sender, which packets are in flight on each path, what
// an ACK acknowledges, which gaps mean loss, retransmission timeouts with
// exponential backoff and spurious-retransmission detection; on the
// receiver, which packet numbers arrived on each path, for building ACKs
// with a cumulative number and a 256-bit SACK bitmap.
//
// Packet numbers are per path and never reused for a retransmission in
// multipath mode (a resend gets a fresh number, usually on another path),
// so every RTT sample is unambiguous and a gap is loss, not reordering. In
// go-back-N mode (Rewind) the sender resends from the cumulative number
// with the same packet numbers, like RoCEv2.
//
// A SentPath reports outcomes through the Handler its owner passes in,
// naming each packet by the opaque Ref the owner gave when sending it.
package ackhandler

import (
	"time"

	"github.com/multiplane/multiplane/transport/internal/congestion"
	"github.com/multiplane/multiplane/transport/internal/protocol"
	"github.com/multiplane/multiplane/transport/internal/wire"
)

// Ref names the data a packet carried; the owner defines its meaning.
type Ref uint64

// Handler receives the outcome of packets.
type Handler interface {
	// OnAcked is called once per acknowledged packet. wasLost means the
	// packet had been declared lost: its resend was spurious.
	OnAcked(ref Ref, size protocol.ByteCount, wasLost bool)
	// OnLost is called when a packet is declared lost (gap or timeout); the
	// owner resends its data.
	OnLost(ref Ref, size protocol.ByteCount)
}

type pktState uint8

const (
	stateInFlight pktState = iota + 1
	stateAcked
	stateLost
)

type sentPacket struct {
	ref   Ref
	sent  time.Time
	size  protocol.ByteCount
	state pktState
	cause Detector // what declared it lost
}

// Detector names what declared a packet lost.
type Detector uint8

const (
	// ByGap: ReorderThreshold later packets of the path were acknowledged.
	ByGap Detector = iota
	// ByTime: a later packet was acknowledged and the reordering window passed.
	ByTime
	// ByShared: another connection's later packet on the shared path was
	// acknowledged and the reordering window passed.
	ByShared
	// ByTimeout: the retransmission timer fired.
	ByTimeout
	// ByRemoval: the path left the path set (AbandonAll).
	ByRemoval
	// Detectors is the number of detectors.
	Detectors
)

// DetectorStats count what one detector declared lost and how much of it
// was acknowledged afterwards.
type DetectorStats struct {
	Lost, Spurious uint64
}

// PathStats are the sender-side counters of one path.
type PathStats struct {
	PacketsSent, BytesSent       uint64
	PacketsAcked, BytesAcked     uint64
	PacketsLost                  uint64
	SpuriousLosses               uint64
	Timeouts                     uint64
	SpuriousTimeouts             uint64
	Stalls                       uint64 // timeouts of every path at once: backed off only
	ECNMarks                     uint64
	ByDetector                   [Detectors]DetectorStats
	SmoothedRTT, MinRTT, RTO     time.Duration
	FabricRTT                    time.Duration // RTTStats.RoundMin
	CongestionWindow, BytesInFly protocol.ByteCount
}

// SentPath tracks the packets sent on one path.
type SentPath struct {
	ID  protocol.PathID
	RTT *congestion.RTTStats
	CC  congestion.SendAlgorithm
	// Shared, if set, is the path's state shared with other connections'
	// paths: it is told of every change of the bytes in flight and of what
	// was delivered (see SharedState).
	Shared SharedState
	// ReorderThreshold is how many later packets must be acknowledged
	// before a missing one is declared lost (1: any gap is loss).
	ReorderThreshold protocol.PacketNumber

	ring         []sentPacket
	base, next   protocol.PacketNumber
	highest      protocol.PacketNumber // largest next ever (go-back-N rewinds next)
	inFlight     protocol.ByteCount
	largestAcked protocol.PacketNumber
	hasAcked     bool
	lastCE       uint32
	lastProgress time.Time
	backoff      uint
	// packets [rtoFirst, rtoEnd) were declared lost by the last timeout
	rtoFirst, rtoEnd protocol.PacketNumber
	rtoPending       bool
	lossTime         time.Time
	lowInFlight      protocol.PacketNumber // time-based detection scans from here
	contended        bool                  // see ArmLossTimer
	stats            PathStats
}

// SharedState is what a path shares with the same path of other
// connections to the same peer.
type SharedState interface {
	// AddInFlight adds to the bytes all of them have in flight.
	AddInFlight(protocol.ByteCount)
	// OnDelivered records that a packet sent at sent was acknowledged.
	OnDelivered(sent time.Time)
	// DeliveredSent returns the latest send time of a packet acknowledged
	// on the path, by any of them. A packet sent well before that and
	// still unacknowledged after the reordering window is lost, even when
	// its own connection sent nothing after it (the path delivers in order:
	// one queue per plane and entropy).
	DeliveredSent() time.Time
}

// initialRing is how many packets a path's ring holds before it grows (a
// power of two): small, so an idle connection costs little; it doubles as
// the path's window fills it.
const initialRing = 16

// NewSentPath returns a tracker for a path.
func NewSentPath(id protocol.PathID, rtt *congestion.RTTStats, cc congestion.SendAlgorithm) *SentPath {
	return &SentPath{ID: id, RTT: rtt, CC: cc, ReorderThreshold: 3, ring: make([]sentPacket, initialRing)}
}

func (p *SentPath) at(pn protocol.PacketNumber) *sentPacket {
	return &p.ring[int(pn)&(len(p.ring)-1)]
}

func before(a, b protocol.PacketNumber) bool { return int32(a-b) < 0 }

// BytesInFlight returns the bytes sent and not yet acknowledged or lost.
func (p *SentPath) BytesInFlight() protocol.ByteCount { return p.inFlight }

func (p *SentPath) addInFlight(d protocol.ByteCount) {
	p.inFlight += d
	if p.Shared != nil {
		p.Shared.AddInFlight(d)
	}
}

// Release takes the path's bytes in flight out of the shared total: the
// connection ended, and what it had in flight will never be acknowledged.
func (p *SentPath) Release() {
	if p.Shared != nil && p.inFlight != 0 {
		p.Shared.AddInFlight(-p.inFlight)
	}
	p.inFlight = 0
}

// CanSend reports whether the window allows another packet.
func (p *SentPath) CanSend() bool { return p.CC.CanSend(p.inFlight) }

// NextPacketNumber returns the number the next packet gets.
func (p *SentPath) NextPacketNumber() protocol.PacketNumber { return p.next }

// ConsecutiveTimeouts returns the timeouts since the path last made progress.
func (p *SentPath) ConsecutiveTimeouts() int { return int(p.backoff) }

// OnSent records a packet and returns its packet number.
func (p *SentPath) OnSent(now time.Time, ref Ref, size protocol.ByteCount) protocol.PacketNumber {
	if int(p.highest-p.base) >= len(p.ring) || int(p.next-p.base) >= len(p.ring) {
		p.grow()
	}
	pn := p.next
	p.next++
	if before(p.highest, p.next) {
		p.highest = p.next
	}
	*p.at(pn) = sentPacket{ref: ref, sent: now, size: size, state: stateInFlight}
	if p.inFlight == 0 {
		p.lastProgress = now
	}
	p.CC.OnPacketSent(now, p.inFlight, size)
	p.addInFlight(size)
	p.stats.PacketsSent++
	p.stats.BytesSent += uint64(size)
	return pn
}

func (p *SentPath) grow() {
	old := p.ring
	p.ring = make([]sentPacket, 2*len(old))
	end := p.next
	if before(end, p.highest) {
		end = p.highest
	}
	for pn := p.base; pn != end; pn++ {
		*p.at(pn) = old[int(pn)&(len(old)-1)]
	}
}

// OnAck processes the path's block of an ACK. It returns the bytes newly
// acknowledged (including packets that had been declared lost: the path
// delivers) and the number of packets declared lost.
//
// endpointDelay is the part of the round trip spent waiting in the two
// endpoints (the block's ack delay plus the time the ACK waited here): the
// RTT sample taken from the block's largest packet, if this ACK is the
// first to acknowledge it, gives congestion control the fabric's share.
func (p *SentPath) OnAck(now time.Time, blk *wire.PathAck, endpointDelay time.Duration, h Handler) (acked protocol.ByteCount, lost int) {
	if !before(blk.Largest, p.next) { // acknowledges what was never sent
		return 0, 0
	}
	prior := p.inFlight
	var spurious protocol.ByteCount
	var rttPN protocol.PacketNumber
	rttOK := false
	var newestSent time.Time
	ack := func(pn protocol.PacketNumber) {
		e := p.at(pn)
		switch e.state {
		case stateInFlight:
			p.addInFlight(-e.size)
			if e.sent.After(newestSent) {
				newestSent = e.sent
			}
			acked += e.size
			p.stats.PacketsAcked++
			p.stats.BytesAcked += uint64(e.size)
			if !rttOK || before(rttPN, pn) {
				rttPN, rttOK = pn, true
			}
			e.state = stateAcked
			h.OnAcked(e.ref, e.size, false)
		case stateLost:
			p.stats.SpuriousLosses++
			p.stats.ByDetector[e.cause].Spurious++
			e.state = stateAcked
			spurious += e.size
			if pn == blk.Largest {
				// Its own arrival sent this ACK, so its age is how long
				// acknowledging took. Covered by an ACK for later packets,
				// its age may be that of a lost ACK, and on a shared path
				// it would raise every connection's RTO.
				p.RTT.UpdateMax(now, now.Sub(e.sent))
			}
			if p.rtoPending && !before(pn, p.rtoFirst) && before(pn, p.rtoEnd) {
				p.rtoPending = false
				p.stats.SpuriousTimeouts++
				p.CC.OnSpuriousTimeout(now)
			}
			h.OnAcked(e.ref, e.size, true)
		}
	}
	// Everything below the cumulative number.
	for pn := p.base; before(pn, blk.Cumulative) && before(pn, p.next); pn++ {
		ack(pn)
	}
	// The SACK window.
	lo := blk.Largest - protocol.PacketNumber(blk.Words)*64
	if before(lo, p.base) || int32(blk.Largest-lo) < 0 {
		lo = p.base
	}
	for pn := lo; !before(blk.Largest, pn); pn++ {
		if r, known := blk.Received(pn); known && r {
			ack(pn)
		}
	}
	if rttOK && rttPN == blk.Largest {
		e := p.at(rttPN)
		p.RTT.Update(now, now.Sub(e.sent), endpointDelay)
	}
	if p.Shared != nil && !newestSent.IsZero() {
		p.Shared.OnDelivered(newestSent)
	}
	if !p.hasAcked || before(p.largestAcked, blk.Largest) {
		p.largestAcked, p.hasAcked = blk.Largest, true
	}
	if acked > 0 {
		p.lastProgress = now
		p.backoff = 0
		p.CC.OnPacketAcked(now, acked, prior)
	}
	// Gaps: a packet missing with ReorderThreshold later packets acknowledged.
	th := p.ReorderThreshold
	if th == 0 {
		th = 1
	}
	limit := p.largestAcked - th + 1
	for pn := lo; before(pn, limit); pn++ {
		e := p.at(pn)
		if e.state != stateInFlight {
			continue
		}
		if r, known := blk.Received(pn); known && !r {
			p.markLost(now, e, ByGap, h)
			lost++
		}
	}
	// Time: a packet older than the largest acknowledged one and still
	// missing after a reordering window is lost even if fewer than
	// ReorderThreshold packets followed it (RACK), so a loss near the tail
	// of a burst does not wait for the retransmission timeout.
	lost += p.detectByTime(now, h)
	if blk.ECNCE > p.lastCE {
		n := blk.ECNCE - p.lastCE
		p.lastCE = blk.ECNCE
		p.stats.ECNMarks += uint64(n)
		p.CC.OnECN(now, int(n))
	}
	if spurious > 0 {
		p.lastProgress = now
		p.backoff = 0
	}
	p.advanceBase()
	return acked + spurious, lost
}

// lossDelay is RACK's reordering window: 5/4 of the smoothed RTT.
func (p *SentPath) lossDelay() time.Duration {
	return p.RTT.Smoothed() + p.RTT.Smoothed()/4
}

// detectByTime declares lost the packets sent before the largest
// acknowledged one that have waited lossDelay, and arms LossTime for the
// rest.
func (p *SentPath) detectByTime(now time.Time, h Handler) int {
	p.lossTime = time.Time{}
	delay := p.lossDelay()
	if !p.hasAcked {
		return p.detectByShared(now, delay, h)
	}
	n := 0
	start := p.lowInFlight
	if before(start, p.base) {
		start = p.base
	}
	low, lowSet := p.largestAcked, false
	for pn := start; before(pn, p.largestAcked) && before(pn, p.next); pn++ {
		e := p.at(pn)
		if e.state != stateInFlight {
			continue
		}
		if t := e.sent.Add(delay); !now.Before(t) {
			p.markLost(now, e, ByTime, h)
			n++
		} else {
			if !lowSet {
				low, lowSet = pn, true
			}
			if p.lossTime.IsZero() || t.Before(p.lossTime) {
				p.lossTime = t
			}
		}
	}
	// Below low nothing under the largest acknowledged is in flight any
	// more, so the next scan starts there.
	p.lowInFlight = low
	return n + p.detectByShared(now, delay, h)
}

// detectByShared declares lost the packets at or after the largest
// acknowledged one that were sent well before a packet the shared path
// delivered and have waited lossDelay, and arms LossTime for the first
// one left. A connection with a few packets in flight per turn seldom
// sends after its lost packet, so without this every such loss waited for
// the retransmission timeout. While the path is contended (ArmLossTimer)
// a packet without that evidence yet is looked at again later.
func (p *SentPath) detectByShared(now time.Time, delay time.Duration, h Handler) int {
	if p.Shared == nil {
		return 0
	}
	delivered := p.Shared.DeliveredSent()
	slack := delay / 8 // batches of several connections leave in any order
	start := p.largestAcked
	if !p.hasAcked || before(start, p.base) {
		start = p.base
	}
	n := 0
	for pn := start; before(pn, p.next); pn++ {
		e := p.at(pn)
		if e.state != stateInFlight {
			continue
		}
		if !delivered.After(e.sent.Add(slack)) { // nothing sent after it delivered (yet)
			if p.contended {
				t := e.sent.Add(delay)
				if later := now.Add(delay); t.Before(later) {
					t = later
				}
				p.arm(t)
			}
			break
		}
		if t := e.sent.Add(delay); now.Before(t) {
			p.arm(t)
			break
		}
		p.markLost(now, e, ByShared, h)
		n++
	}
	return n
}

// ArmLossTimer marks the path contended (other connections send on it
// too, taking turns) and arms the loss timer for what was just sent, so a
// loss that only other connections' deliveries reveal is found without an
// acknowledgement of this connection's own to look at it.
func (p *SentPath) ArmLossTimer(now time.Time, contended bool) {
	p.contended = contended
	if contended {
		p.arm(now.Add(p.lossDelay()))
	}
}

func (p *SentPath) arm(t time.Time) {
	if p.lossTime.IsZero() || t.Before(p.lossTime) {
		p.lossTime = t
	}
}

// LossTime returns when OnLossTimer should run (zero: not armed, or
// nothing is in flight any more: a timeout or the path's removal declared
// the rest lost, and a timer left armed for them would be due forever).
func (p *SentPath) LossTime() time.Time {
	if p.inFlight == 0 {
		return time.Time{}
	}
	return p.lossTime
}

// OnLossTimer runs time-based loss detection if it is due and returns the
// number of packets declared lost.
func (p *SentPath) OnLossTimer(now time.Time, h Handler) int {
	if p.lossTime.IsZero() || now.Before(p.lossTime) {
		return 0
	}
	n := p.detectByTime(now, h)
	p.advanceBase()
	return n
}

func (p *SentPath) markLost(now time.Time, e *sentPacket, by Detector, h Handler) {
	prior := p.inFlight
	e.state, e.cause = stateLost, by
	p.stats.ByDetector[by].Lost++
	p.addInFlight(-e.size)
	p.stats.PacketsLost++
	p.CC.OnPacketLost(now, e.size, prior)
	h.OnLost(e.ref, e.size)
}

// advanceBase forgets acknowledged packets and lost ones too old for a late
// acknowledgement to be reported.
func (p *SentPath) advanceBase() {
	keep := protocol.PacketNumber(2 * wire.MaxSackWords * 64)
	for p.base != p.next {
		e := p.at(p.base)
		if e.state == stateAcked || (e.state == stateLost && before(p.base+keep, p.next)) {
			p.base++
			continue
		}
		break
	}
}

// RTODeadline returns when the path's retransmission timer fires, or the
// zero time when nothing is in flight.
func (p *SentPath) RTODeadline() time.Time {
	if p.inFlight == 0 {
		return time.Time{}
	}
	b := p.backoff
	if b > 6 {
		b = 6
	}
	return p.lastProgress.Add(p.RTT.RTO() << b)
}

// OnTimeout fires the retransmission timer if it is due: every packet in
// flight is declared lost, the window collapses and the timer backs off.
// It returns the number of packets declared lost.
func (p *SentPath) OnTimeout(now time.Time, h Handler) int {
	d := p.RTODeadline()
	if d.IsZero() || now.Before(d) {
		return 0
	}
	n := 0
	p.rtoFirst, p.rtoEnd, p.rtoPending = p.base, p.next, true
	for pn := p.base; pn != p.next; pn++ {
		if e := p.at(pn); e.state == stateInFlight {
			p.markLost(now, e, ByTimeout, h)
			n++
		}
	}
	p.CC.OnRetransmissionTimeout(now)
	p.stats.Timeouts++
	p.backoff++
	p.lastProgress = now
	p.advanceBase()
	return n
}

// BackOff doubles the retransmission timer without declaring anything
// lost, for when every path timed out at once (a stall, not a path
// failure). It counts as a timeout for the backoff.
func (p *SentPath) BackOff(now time.Time) {
	d := p.RTODeadline()
	if d.IsZero() || now.Before(d) {
		return
	}
	p.backoff++
	p.lastProgress = now
	p.stats.Stalls++
}

// AbandonAll declares every packet in flight lost without a congestion
// signal (used when the path is removed from the path set).
func (p *SentPath) AbandonAll(h Handler) {
	for pn := p.base; pn != p.next; pn++ {
		if e := p.at(pn); e.state == stateInFlight {
			e.state, e.cause = stateLost, ByRemoval
			p.stats.ByDetector[ByRemoval].Lost++
			p.addInFlight(-e.size)
			h.OnLost(e.ref, e.size)
		}
	}
}

// ECNMarks returns the CE marks echoed so far.
func (p *SentPath) ECNMarks() uint64 { return p.stats.ECNMarks }

// Stats returns the path's counters.
func (p *SentPath) Stats() PathStats {
	s := p.stats
	s.SmoothedRTT = p.RTT.Smoothed()
	s.MinRTT = p.RTT.Min()
	s.FabricRTT = p.RTT.RoundMin()
	s.RTO = p.RTT.RTO()
	s.CongestionWindow = p.CC.CongestionWindow()
	s.BytesInFly = p.inFlight
	return s
}

// Rewind implements go-back-N: it returns, in order, the refs of every
// packet from the first unacknowledged one on, and resets the next packet
// number to it, so resending them reuses the same numbers. The refs are
// appended to buf.
func (p *SentPath) Rewind(now time.Time, buf []Ref) []Ref {
	for pn := p.base; pn != p.next; pn++ {
		e := p.at(pn)
		if e.state == stateInFlight || e.state == stateLost {
			buf = append(buf, e.ref)
			if e.state == stateInFlight {
				// Out of flight until resent: an ACK for it meanwhile
				// must not take its bytes out a second time.
				p.addInFlight(-e.size)
				e.state = stateLost
			}
			p.stats.PacketsLost++
		}
	}
	p.next = p.base
	p.lastProgress = now
	return buf
}

// OnCumulativeAck processes a go-back-N acknowledgement: every packet below
// cum was received in order.
func (p *SentPath) OnCumulativeAck(now time.Time, cum protocol.PacketNumber, endpointDelay time.Duration, h Handler) protocol.ByteCount {
	if before(p.highest, cum) {
		return 0
	}
	if before(p.next, cum) {
		// Acknowledges packets sent before a rewind and not resent yet:
		// they arrived, so skip past them.
		p.next = cum
	}
	prior := p.inFlight
	var acked protocol.ByteCount
	var last *sentPacket // the newest acknowledged packet sent once: an RTT sample
	progress := false
	for ; before(p.base, cum); p.base++ {
		e := p.at(p.base)
		if e.state == stateInFlight {
			p.addInFlight(-e.size)
			last = e
		}
		if e.state == stateAcked || e.state == 0 {
			continue
		}
		acked += e.size
		p.stats.PacketsAcked++
		p.stats.BytesAcked += uint64(e.size)
		e.state = stateAcked
		h.OnAcked(e.ref, e.size, false)
		progress = true
	}
	if last != nil {
		// Not from a rewound packet: its send time is not the one whose
		// arrival this acknowledges (Karn).
		p.RTT.Update(now, now.Sub(last.sent), endpointDelay)
	}
	if progress {
		p.lastProgress = now
		p.backoff = 0
		p.CC.OnPacketAcked(now, acked, prior)
	}
	return acked
}

// GBNTimedOut reports whether the go-back-N timer fired, and backs it off.
func (p *SentPath) GBNTimedOut(now time.Time) bool {
	d := p.RTODeadline()
	if d.IsZero() || now.Before(d) {
		return false
	}
	p.stats.Timeouts++
	p.backoff++
	p.CC.OnRetransmissionTimeout(now)
	return true
}
