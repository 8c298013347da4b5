package ackhandler

import (
	"time"

	"github.com/multiplane/multiplane/transport/internal/protocol"
	"github.com/multiplane/multiplane/transport/internal/wire"
)

const recvWindowBits = wire.MaxSackWords * 64

// ReceivedPath records the packet numbers received on one path and builds
// the path's ACK block.
type ReceivedPath struct {
	cum     protocol.PacketNumber // every number below has arrived
	largest protocol.PacketNumber
	any     bool
	// bits: bit i set means largest-1-i arrived.
	bits [wire.MaxSackWords]uint64
	ce   uint32
	// largestAt is when the largest packet reached the host.
	largestAt time.Time
	// Unacked counts packets received since the last ACK block was built.
	Unacked int
}

func (r *ReceivedPath) has(pn protocol.PacketNumber) (rcvd, known bool) {
	if before(pn, r.cum) || (r.any && pn == r.largest) {
		return true, true
	}
	if !r.any || before(r.largest, pn) {
		return false, true
	}
	d := uint32(r.largest - 1 - pn)
	if d >= recvWindowBits {
		return false, false
	}
	return r.bits[d/64]&(1<<(d%64)) != 0, true
}

func (r *ReceivedPath) shift(k uint32) {
	if k >= recvWindowBits {
		r.bits = [wire.MaxSackWords]uint64{}
		return
	}
	words, bitsK := int(k/64), k%64
	for i := wire.MaxSackWords - 1; i >= 0; i-- {
		var v uint64
		if j := i - words; j >= 0 {
			v = r.bits[j] << bitsK
			if bitsK != 0 && j-1 >= 0 {
				v |= r.bits[j-1] >> (64 - bitsK)
			}
		}
		r.bits[i] = v
	}
}

// Next returns the packet number the path expects next: one past the
// largest received (DATA carries packet numbers truncated, see
// wire.Expand24).
func (r *ReceivedPath) Next() protocol.PacketNumber {
	if r.any {
		return r.largest + 1
	}
	return r.cum
}

// OnPacket records packet pn, which reached the host at at (ce: it carried
// a CE mark). It returns false for a duplicate.
func (r *ReceivedPath) OnPacket(pn protocol.PacketNumber, ce bool, at time.Time) bool {
	if rcvd, known := r.has(pn); rcvd && known {
		return false
	}
	switch {
	case !r.any:
		r.any, r.largest, r.largestAt = true, pn, at
	case before(r.largest, pn):
		k := uint32(pn - r.largest)
		r.shift(k)
		d := k - 1
		if d < recvWindowBits {
			r.bits[d/64] |= 1 << (d % 64)
		}
		r.largest, r.largestAt = pn, at
	default:
		d := uint32(r.largest - 1 - pn)
		if d < recvWindowBits {
			r.bits[d/64] |= 1 << (d % 64)
		}
	}
	if ce {
		r.ce++
	}
	for {
		rcvd, known := r.has(r.cum)
		if !rcvd || !known || !r.any || before(r.largest, r.cum) {
			break
		}
		r.cum++
	}
	r.Unacked++
	return true
}

// FillAck writes the path's ACK block, sent at now, with a SACK bitmap of
// words 64-bit words and resets Unacked. It reports false when nothing
// arrived yet.
func (r *ReceivedPath) FillAck(id protocol.PathID, words int, now time.Time, blk *wire.PathAck) bool {
	if !r.any {
		return false
	}
	if words > wire.MaxSackWords {
		words = wire.MaxSackWords
	}
	*blk = wire.PathAck{PathID: id, Cumulative: r.cum, Largest: r.largest, ECNCE: r.ce, AckDelay: max(now.Sub(r.largestAt), 0), Words: uint8(words)}
	copy(blk.Bitmap[:words], r.bits[:words])
	r.Unacked = 0
	return true
}

// InOrder is the go-back-N receiver of one path: it accepts only the next
// expected packet number.
type InOrder struct {
	Expected protocol.PacketNumber
	nakSent  bool
	lastAt   time.Time // when Expected-1 reached the host
	Unacked  int
}

// OnPacket reports whether pn is accepted (it is the next expected packet)
// and whether a NAK should be sent (first out-of-order packet since the
// last accepted one).
func (g *InOrder) OnPacket(pn protocol.PacketNumber, at time.Time) (accept, nak bool) {
	g.Unacked++
	if pn == g.Expected {
		g.Expected++
		g.lastAt = at
		g.nakSent = false
		return true, false
	}
	if before(g.Expected, pn) && !g.nakSent {
		g.nakSent = true
		return false, true
	}
	return false, false
}

// FillAck writes the path's cumulative ACK block, sent at now.
func (g *InOrder) FillAck(id protocol.PathID, now time.Time, blk *wire.PathAck) {
	*blk = wire.PathAck{PathID: id, Cumulative: g.Expected, Largest: g.Expected - 1}
	if !g.lastAt.IsZero() {
		blk.AckDelay = max(now.Sub(g.lastAt), 0)
	}
}
