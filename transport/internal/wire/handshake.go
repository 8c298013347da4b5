package wire

import (
	"encoding/binary"
	"net/netip"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// Handshake sizes.
const (
	HandshakeHeaderSize = 24
	addrSize            = 18
	// MaxPlanes is the most plane addresses a handshake carries.
	MaxPlanes = 32
)

// Handshake is an INIT (Type TypeInit) or INIT_ACK (TypeInitAck) packet.
type Handshake struct {
	Type            Type // TypeInit or TypeInitAck
	Mode            protocol.Mode
	DstConnID       protocol.ConnectionID // 0 in INIT
	SrcConnID       protocol.ConnectionID
	MaxDatagramSize protocol.ByteCount
	MaxData         protocol.ByteCount
	// Addrs are the sender's receive addresses, one per plane.
	Addrs []netip.AddrPort
}

// ParseHandshake decodes an INIT or INIT_ACK packet. It allocates the
// address slice; handshakes are rare.
func ParseHandshake(b []byte) (Handshake, error) {
	body, err := checkTyped(b, TypeInit, TypeInitAck)
	if err != nil {
		return Handshake{}, err
	}
	if len(body) < HandshakeHeaderSize {
		return Handshake{}, errf("short handshake header")
	}
	h := Handshake{
		Type:            Type(body[1] & 0x0f),
		Mode:            protocol.Mode(body[2]),
		DstConnID:       protocol.ConnectionID(binary.BigEndian.Uint32(body[4:])),
		SrcConnID:       protocol.ConnectionID(binary.BigEndian.Uint32(body[8:])),
		MaxDatagramSize: protocol.ByteCount(binary.BigEndian.Uint16(body[12:])),
		MaxData:         protocol.ByteCount(binary.BigEndian.Uint64(body[16:])),
	}
	if body[1]&0xf0 != 0 || body[14] != 0 || body[15] != 0 {
		return Handshake{}, errf("handshake reserved bits set")
	}
	if h.Mode != protocol.ModeMultipath && h.Mode != protocol.ModeGBN {
		return Handshake{}, errf("handshake mode %d", h.Mode)
	}
	if h.MaxData < 0 {
		return Handshake{}, errf("handshake max data overflows")
	}
	if h.MaxDatagramSize < protocol.MinDatagramSize {
		return Handshake{}, errf("handshake max datagram size %d", h.MaxDatagramSize)
	}
	n := int(body[3])
	if n == 0 || n > MaxPlanes {
		return Handshake{}, errf("handshake with %d addresses", n)
	}
	if len(body) != HandshakeHeaderSize+n*addrSize {
		return Handshake{}, errf("handshake length")
	}
	h.Addrs = make([]netip.AddrPort, n)
	for i := range h.Addrs {
		p := body[HandshakeHeaderSize+i*addrSize:]
		ip := netip.AddrFrom16([16]byte(p[:16])).Unmap()
		h.Addrs[i] = netip.AddrPortFrom(ip, binary.BigEndian.Uint16(p[16:]))
	}
	return h, nil
}

// Length returns the encoded size of h.
func (h *Handshake) Length() protocol.ByteCount {
	return protocol.ByteCount(HandshakeHeaderSize + addrSize*len(h.Addrs) + CRCSize)
}

// Append appends the encoded packet to b.
func (h *Handshake) Append(b []byte) []byte {
	start := len(b)
	b = append(b, Version, byte(h.Type)&0x0f, byte(h.Mode), byte(len(h.Addrs)))
	b = binary.BigEndian.AppendUint32(b, uint32(h.DstConnID))
	b = binary.BigEndian.AppendUint32(b, uint32(h.SrcConnID))
	b = binary.BigEndian.AppendUint16(b, uint16(h.MaxDatagramSize))
	b = append(b, 0, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(h.MaxData))
	for _, a := range h.Addrs {
		ip := a.Addr().As16()
		b = append(b, ip[:]...)
		b = binary.BigEndian.AppendUint16(b, a.Port())
	}
	return appendCRC(b, start)
}
