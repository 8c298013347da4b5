package wire

import (
	"encoding/binary"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// HandshakeSize is the size of an INIT or INIT_ACK packet, CRC included.
const HandshakeSize = 32 + CRCSize

// Handshake is an INIT (Type TypeInit) or INIT_ACK (TypeInitAck) packet.
// The dialer sends an INIT on every plane from its receive socket there; the
// acceptor learns the dialer's address on each plane from the source of the
// INIT that crossed it (so relays and NAT-like fabrics work) and answers
// each with an INIT_ACK on the same plane.
type Handshake struct {
	Type            Type // TypeInit or TypeInitAck
	Mode            protocol.Mode
	Plane           uint8 // plane the packet is sent on
	Planes          uint8 // number of planes of the sender
	DstConnID       protocol.ConnectionID
	SrcConnID       protocol.ConnectionID
	MaxDatagramSize protocol.ByteCount
	MaxData         protocol.ByteCount
	// Instance is random per transport: the acceptor keys a dialer's
	// connection by (Instance, SrcConnID), as ids are not unique across hosts.
	Instance uint64
}

// ParseHandshake decodes an INIT or INIT_ACK packet.
func ParseHandshake(b []byte) (Handshake, error) {
	body, err := checkTyped(b, TypeInit, TypeInitAck)
	if err != nil {
		return Handshake{}, err
	}
	if len(body) != HandshakeSize-CRCSize {
		return Handshake{}, errf("handshake length %d", len(b))
	}
	h := Handshake{
		Type:            Type(body[0] & 0x0f),
		Mode:            protocol.Mode(body[2]),
		Plane:           body[3],
		Planes:          body[4],
		DstConnID:       protocol.ConnectionID(binary.BigEndian.Uint32(body[8:])),
		SrcConnID:       protocol.ConnectionID(binary.BigEndian.Uint32(body[12:])),
		MaxDatagramSize: protocol.ByteCount(binary.BigEndian.Uint16(body[6:])),
		MaxData:         protocol.ByteCount(binary.BigEndian.Uint64(body[16:])),
		Instance:        binary.BigEndian.Uint64(body[24:]),
	}
	if body[1] != 0 || body[5] != 0 {
		return Handshake{}, errf("handshake reserved bits set")
	}
	if h.Mode != protocol.ModeMultipath && h.Mode != protocol.ModeGBN {
		return Handshake{}, errf("handshake mode %d", h.Mode)
	}
	if h.Planes == 0 || h.Plane >= h.Planes {
		return Handshake{}, errf("handshake plane %d of %d", h.Plane, h.Planes)
	}
	if h.MaxData < 0 {
		return Handshake{}, errf("handshake max data overflows")
	}
	if h.MaxDatagramSize < protocol.MinDatagramSize {
		return Handshake{}, errf("handshake max datagram size %d", h.MaxDatagramSize)
	}
	return h, nil
}

// Length returns the encoded size of h.
func (h *Handshake) Length() protocol.ByteCount { return HandshakeSize }

// Append appends the encoded packet to b.
func (h *Handshake) Append(b []byte) []byte {
	start := len(b)
	b = append(b, prefix(h.Type), 0, byte(h.Mode), h.Plane, h.Planes, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(h.MaxDatagramSize))
	b = binary.BigEndian.AppendUint32(b, uint32(h.DstConnID))
	b = binary.BigEndian.AppendUint32(b, uint32(h.SrcConnID))
	b = binary.BigEndian.AppendUint64(b, uint64(h.MaxData))
	b = binary.BigEndian.AppendUint64(b, h.Instance)
	return appendCRC(b, start)
}
