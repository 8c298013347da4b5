package wire

import (
	"encoding/binary"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// DataHeaderSize is the fixed part of a DATA packet before the payload.
const DataHeaderSize = 22

// DataOverhead is the bytes of a DATA datagram that are not payload.
const DataOverhead = DataHeaderSize + CRCSize

// MaxEntropy bounds Data.Entropy: it shares byte 1 with the flags.
const MaxEntropy = 63

// MaxDataPayload returns the payload that fits a datagram of size dgram.
func MaxDataPayload(dgram protocol.ByteCount) protocol.ByteCount { return dgram - DataOverhead }

// Data carries a piece of a message on a path. The payload length is the
// datagram's length less DataOverhead.
type Data struct {
	Flags byte // FlagRetransmit, FlagAckNow
	// Entropy is the path's index among the sender's ports on the plane
	// the datagram crosses (0..MaxEntropy); the receiver knows the plane
	// from the socket it arrived on.
	Entropy     uint8
	DstConnID   protocol.ConnectionID
	Seq         protocol.PacketNumber
	MessageID   uint32
	Offset      uint32
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
		Seq:         protocol.PacketNumber(binary.BigEndian.Uint32(body[6:])),
		MessageID:   binary.BigEndian.Uint32(body[10:]),
		Offset:      binary.BigEndian.Uint32(body[14:]),
		TotalLength: binary.BigEndian.Uint32(body[18:]),
		Payload:     body[DataHeaderSize:],
	}
	n := len(d.Payload)
	if uint64(d.Offset)+uint64(n) > uint64(d.TotalLength) {
		return Data{}, errf("DATA beyond message end")
	}
	if n == 0 && d.TotalLength != 0 {
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
	b = binary.BigEndian.AppendUint32(b, uint32(d.Seq))
	b = binary.BigEndian.AppendUint32(b, d.MessageID)
	b = binary.BigEndian.AppendUint32(b, d.Offset)
	return binary.BigEndian.AppendUint32(b, d.TotalLength)
}

// FinishData appends the CRC of the DATA packet that starts at b[start:].
func FinishData(b []byte, start int) []byte { return appendCRC(b, start) }
