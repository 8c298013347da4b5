package wire

import (
	"encoding/binary"
	"time"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// Sizes of ACK parts.
const (
	AckHeaderSize      = 24
	AckBlockHeaderSize = 20
	// MaxSackWords is the largest SACK bitmap in 64-bit words (512 bits).
	MaxSackWords = 8
	// SackBits is the bitmap size receivers send: 256 bits.
	SackBits = 256
	// MaxAckDelay is the largest encodable PathAck.AckDelay.
	MaxAckDelay = time.Duration(1<<32 - 1)
)

// PathAck acknowledges the packets received on one path.
type PathAck struct {
	PathID protocol.PathID
	// Cumulative: every packet number below it was received (the next
	// expected packet number).
	Cumulative protocol.PacketNumber
	// Largest is the largest packet number received on the path.
	Largest protocol.PacketNumber
	// ECNCE is the count of CE-marked packets received on the path so far.
	ECNCE uint32
	// AckDelay is how long the receiver held Largest before sending this
	// block, from its kernel receive time (nanosecond resolution, at most
	// MaxAckDelay): the sender removes the receiver's share from its RTT
	// sample so congestion control sees the fabric's delay.
	AckDelay time.Duration
	// Words is the number of bitmap words in use (0..MaxSackWords).
	Words uint8
	// Bitmap bit i set means packet Largest-1-i was received: the SACK
	// window is anchored at the newest packet, so a hole that will never be
	// filled (its data was resent on another path) does not freeze it.
	Bitmap [MaxSackWords]uint64
}

// Received reports whether the block acknowledges packet number pn. known
// is false when pn lies outside what the block describes.
func (a *PathAck) Received(pn protocol.PacketNumber) (received, known bool) {
	if int32(pn-a.Cumulative) < 0 || pn == a.Largest {
		return true, true
	}
	if int32(pn-a.Largest) > 0 {
		return false, true
	}
	d := uint32(a.Largest - 1 - pn)
	if d >= uint32(a.Words)*64 {
		return false, false
	}
	return a.Bitmap[d/64]&(1<<(d%64)) != 0, true
}

func (a *PathAck) length() int { return AckBlockHeaderSize + 8*int(a.Words) }

// Ack acknowledges packets on any number of paths and carries the
// receiver's flow-control credit and rate grant.
type Ack struct {
	Flags     byte // FlagNAK
	DstConnID protocol.ConnectionID
	MaxData   protocol.ByteCount
	RateGrant protocol.Rate
	Blocks    []PathAck
}

// ParseAck decodes an ACK packet, appending its blocks to blocks[:0] so a
// caller can reuse the slice and parse without allocating.
func ParseAck(b []byte, blocks []PathAck) (Ack, error) {
	body, err := checkTyped(b, TypeAck, TypeAck)
	if err != nil {
		return Ack{}, err
	}
	if len(body) < AckHeaderSize {
		return Ack{}, errf("short ACK header")
	}
	a := Ack{
		Flags:     body[1],
		DstConnID: protocol.ConnectionID(binary.BigEndian.Uint32(body[4:])),
		MaxData:   protocol.ByteCount(binary.BigEndian.Uint64(body[8:])),
		RateGrant: protocol.Rate(binary.BigEndian.Uint64(body[16:])),
	}
	if a.MaxData < 0 {
		return Ack{}, errf("ACK max data overflows")
	}
	if a.Flags&^FlagNAK != 0 {
		return Ack{}, errf("ACK reserved flags set")
	}
	n := int(binary.BigEndian.Uint16(body[2:]))
	p := body[AckHeaderSize:]
	blocks = blocks[:0]
	for i := 0; i < n; i++ {
		if len(p) < AckBlockHeaderSize {
			return Ack{}, errf("short ACK block %d", i)
		}
		blk := PathAck{
			PathID:     protocol.PathID(binary.BigEndian.Uint16(p)),
			Words:      p[2],
			Cumulative: protocol.PacketNumber(binary.BigEndian.Uint32(p[4:])),
			Largest:    protocol.PacketNumber(binary.BigEndian.Uint32(p[8:])),
			ECNCE:      binary.BigEndian.Uint32(p[12:]),
			AckDelay:   time.Duration(binary.BigEndian.Uint32(p[16:])),
		}
		if blk.Words > MaxSackWords {
			return Ack{}, errf("ACK block %d has %d SACK words", i, blk.Words)
		}
		if p[3] != 0 {
			return Ack{}, errf("ACK block %d reserved byte set", i)
		}
		if int32(blk.Largest-blk.Cumulative) < -1 {
			return Ack{}, errf("ACK block %d largest below cumulative", i)
		}
		if len(p) < blk.length() {
			return Ack{}, errf("short ACK bitmap %d", i)
		}
		for w := 0; w < int(blk.Words); w++ {
			blk.Bitmap[w] = binary.BigEndian.Uint64(p[AckBlockHeaderSize+8*w:])
		}
		p = p[blk.length():]
		blocks = append(blocks, blk)
	}
	if len(p) != 0 {
		return Ack{}, errf("%d trailing ACK bytes", len(p))
	}
	a.Blocks = blocks
	return a, nil
}

// AckLength returns the length of the ACK packet at the start of b. A
// datagram may pack several ACK packets back to back, each with its own
// CRC (a receiver of many connections acks a peer's in one datagram);
// AckLength finds where the next one starts without trusting more than
// the bytes it reads.
func AckLength(b []byte) (int, error) {
	if len(b) < AckHeaderSize+CRCSize {
		return 0, errf("short ACK header")
	}
	n := int(binary.BigEndian.Uint16(b[2:]))
	off := AckHeaderSize
	for i := 0; i < n; i++ {
		if len(b) < off+AckBlockHeaderSize {
			return 0, errf("short ACK block %d", i)
		}
		w := int(b[off+2])
		if w > MaxSackWords {
			return 0, errf("ACK block %d has %d SACK words", i, w)
		}
		off += AckBlockHeaderSize + 8*w
	}
	if off += CRCSize; off > len(b) {
		return 0, errf("short ACK: %d bytes of %d", len(b), off)
	}
	return off, nil
}

// Length returns the encoded size of a.
func (a *Ack) Length() protocol.ByteCount {
	n := AckHeaderSize + CRCSize
	for i := range a.Blocks {
		n += a.Blocks[i].length()
	}
	return protocol.ByteCount(n)
}

// Append appends the encoded packet to b.
func (a *Ack) Append(b []byte) []byte {
	start := len(b)
	b = append(b, prefix(TypeAck), a.Flags&FlagNAK)
	b = binary.BigEndian.AppendUint16(b, uint16(len(a.Blocks)))
	b = binary.BigEndian.AppendUint32(b, uint32(a.DstConnID))
	b = binary.BigEndian.AppendUint64(b, uint64(a.MaxData))
	b = binary.BigEndian.AppendUint64(b, uint64(a.RateGrant))
	for i := range a.Blocks {
		blk := &a.Blocks[i]
		w := blk.Words
		if w > MaxSackWords {
			w = MaxSackWords
		}
		b = binary.BigEndian.AppendUint16(b, uint16(blk.PathID))
		b = append(b, w, 0)
		b = binary.BigEndian.AppendUint32(b, uint32(blk.Cumulative))
		b = binary.BigEndian.AppendUint32(b, uint32(blk.Largest))
		b = binary.BigEndian.AppendUint32(b, blk.ECNCE)
		b = binary.BigEndian.AppendUint32(b, uint32(min(max(blk.AckDelay, 0), MaxAckDelay)))
		for j := 0; j < int(w); j++ {
			b = binary.BigEndian.AppendUint64(b, blk.Bitmap[j])
		}
	}
	return appendCRC(b, start)
}
