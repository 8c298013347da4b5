package wire

import (
	"encoding/binary"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// DataHeaderSize is the fixed part of a DATA packet before the payload.
const DataHeaderSize = 26

// DataOverhead is the bytes of a DATA datagram that are not payload.
const DataOverhead = DataHeaderSize + CRCSize

// MaxDataPayload returns the payload that fits a datagram of size dgram.
func MaxDataPayload(dgram protocol.ByteCount) protocol.ByteCount { return dgram - DataOverhead }

// Data carries a piece of a message on a path.
type Data struct {
	Flags       byte // FlagRetransmit, FlagAckNow
	PathID      protocol.PathID
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
		Flags:       body[1] & 0xf0,
		PathID:      protocol.PathID(binary.BigEndian.Uint16(body[2:])),
		DstConnID:   protocol.ConnectionID(binary.BigEndian.Uint32(body[4:])),
		Seq:         protocol.PacketNumber(binary.BigEndian.Uint32(body[8:])),
		MessageID:   binary.BigEndian.Uint32(body[12:]),
		Offset:      binary.BigEndian.Uint32(body[16:]),
		TotalLength: binary.BigEndian.Uint32(body[20:]),
	}
	n := int(binary.BigEndian.Uint16(body[24:]))
	if len(body) != DataHeaderSize+n {
		return Data{}, errf("DATA payload length %d, datagram has %d", n, len(body)-DataHeaderSize)
	}
	if uint64(d.Offset)+uint64(n) > uint64(d.TotalLength) {
		return Data{}, errf("DATA beyond message end")
	}
	if n == 0 && d.TotalLength != 0 {
		return Data{}, errf("empty DATA")
	}
	d.Payload = body[DataHeaderSize:]
	return d, nil
}

// Length returns the encoded size of d.
func (d *Data) Length() protocol.ByteCount {
	return protocol.ByteCount(DataOverhead + len(d.Payload))
}

// Append appends the encoded packet to b.
func (d *Data) Append(b []byte) []byte {
	start := len(b)
	b = d.AppendHeader(b, len(d.Payload))
	b = append(b, d.Payload...)
	return appendCRC(b, start)
}

// AppendHeader appends the DATA header for a payload of n bytes; the caller
// appends the payload and then calls FinishData. It lets the sender copy the
// payload once, straight into the datagram buffer.
func (d *Data) AppendHeader(b []byte, n int) []byte {
	b = append(b, Version, byte(TypeData)|d.Flags&0xf0)
	b = binary.BigEndian.AppendUint16(b, uint16(d.PathID))
	b = binary.BigEndian.AppendUint32(b, uint32(d.DstConnID))
	b = binary.BigEndian.AppendUint32(b, uint32(d.Seq))
	b = binary.BigEndian.AppendUint32(b, d.MessageID)
	b = binary.BigEndian.AppendUint32(b, d.Offset)
	b = binary.BigEndian.AppendUint32(b, d.TotalLength)
	return binary.BigEndian.AppendUint16(b, uint16(n))
}

// FinishData appends the CRC of the DATA packet that starts at b[start:].
func FinishData(b []byte, start int) []byte { return appendCRC(b, start) }

// PutDataHeaderSeq rewrites the path id, sequence number and flags of an
// encoded DATA packet in place and refreshes its CRC.
func PutDataHeaderSeq(pkt []byte, path protocol.PathID, seq protocol.PacketNumber, flags byte) {
	pkt[1] = byte(TypeData) | flags&0xf0
	binary.BigEndian.PutUint16(pkt[2:], uint16(path))
	binary.BigEndian.PutUint32(pkt[8:], uint32(seq))
	n := len(pkt) - CRCSize
	binary.BigEndian.PutUint32(pkt[n:], crcOf(pkt[:n]))
}
