package wire

import (
	"encoding/binary"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// DataHeaderSize is the fixed part of a DATA packet before the payload.
const DataHeaderSize = 19

// DataOverhead is the bytes of a DATA datagram that are not payload.
const DataOverhead = DataHeaderSize + CRCSize

// MaxEntropy bounds Data.Entropy: it shares byte 1 with the flags.
const MaxEntropy = 63

// MaxDataPayload returns the payload that fits a datagram of size dgram.
func MaxDataPayload(dgram protocol.ByteCount) protocol.ByteCount { return dgram - DataOverhead }

// Data carries a piece of a message on a path. The payload length is the
// datagram's length less DataOverhead. Seq, MessageID and Chunk travel as
// their low 24 bits (see Expand24): ParseData returns those bits, Append
// writes them.
type Data struct {
	Flags byte // FlagRetransmit, FlagAckNow
	// Entropy is the path's index among the sender's ports on the plane
	// the datagram crosses (0..MaxEntropy); the receiver knows the plane
	// from the socket it arrived on.
	Entropy   uint8
	DstConnID protocol.ConnectionID
	Seq       protocol.PacketNumber
	MessageID uint32
	// Chunk is the payload's offset in the message in units of the
	// connection's chunk size (both ends cut messages the same way).
	Chunk       uint32
	TotalLength uint32
	Payload     []byte // a view into the parsed datagram
}

// ParseData decodes a DATA packet. Payload aliases b.
func ParseData(b []byte) (Data, error) {
	body, err := checkTyped(b, TypeData, TypeData)
	if err != nil {
		return Data{}, err
	}
	if len(body) < DataHeaderSize {
		return Data{}, errf("short DATA header")
	}
	d := Data{
		Flags:       body[1] & (FlagRetransmit | FlagAckNow),
		Entropy:     body[1] & MaxEntropy,
		DstConnID:   protocol.ConnectionID(binary.BigEndian.Uint32(body[2:])),
		Seq:         protocol.PacketNumber(uint24(body[6:])),
		MessageID:   uint24(body[9:]),
		Chunk:       uint24(body[12:]),
		TotalLength: binary.BigEndian.Uint32(body[15:]),
		Payload:     body[DataHeaderSize:],
	}
	n := len(d.Payload)
	if uint64(n) > uint64(d.TotalLength) {
		return Data{}, errf("DATA longer than its message")
	}
	if n == 0 && (d.TotalLength != 0 || d.Chunk != 0) {
		return Data{}, errf("empty DATA")
	}
	return d, nil
}

// Length returns the encoded size of d.
func (d *Data) Length() protocol.ByteCount {
	return protocol.ByteCount(DataOverhead + len(d.Payload))
}

// Append appends the encoded packet to b.
func (d *Data) Append(b []byte) []byte {
	start := len(b)
	b = d.AppendHeader(b)
	b = append(b, d.Payload...)
	return appendCRC(b, start)
}

// AppendHeader appends the DATA header; the caller appends the payload and
// then calls FinishData. It lets the sender copy the payload once, straight
// into the datagram buffer. Entropy above MaxEntropy is truncated.
func (d *Data) AppendHeader(b []byte) []byte {
	b = append(b, prefix(TypeData), d.Flags&(FlagRetransmit|FlagAckNow)|d.Entropy&MaxEntropy)
	b = binary.BigEndian.AppendUint32(b, uint32(d.DstConnID))
	b = appendUint24(b, uint32(d.Seq))
	b = appendUint24(b, d.MessageID)
	b = appendUint24(b, d.Chunk)
	return binary.BigEndian.AppendUint32(b, d.TotalLength)
}

// Expand24 returns the 32-bit number whose low 24 bits are low and which
// is nearest to next (the number the receiver expects): DATA carries only
// the low 24 bits of its sequence number, message id and chunk index. It
// is exact while the sender keeps the numbers in flight within 2^23 of
// what the receiver expects: a path's window is far below that (32 MiB of
// the smallest, 489-byte chunks is under 2^17 packets), and senders keep at most
// MaxMessagesInFlight messages open per connection.
func Expand24(low, next uint32) uint32 {
	d := (low - next) & 0xffffff
	if d >= 1<<23 {
		return next + d - 1<<24
	}
	return next + d
}

// MaxMessagesInFlight bounds how far a sender's newest message id may run
// ahead of its oldest unacknowledged one (see Expand24).
const MaxMessagesInFlight = 1 << 22

func uint24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func appendUint24(b []byte, v uint32) []byte { return append(b, byte(v>>16), byte(v>>8), byte(v)) }

// FinishData appends the CRC of the DATA packet that starts at b[start:].
func FinishData(b []byte, start int) []byte { return appendCRC(b, start) }
