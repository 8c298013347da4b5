package wire

import (
	"encoding/binary"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// CloseHeaderSize is the fixed part of a CLOSE packet.
const CloseHeaderSize = 10

// MaxReasonLength bounds the reason text of a CLOSE packet.
const MaxReasonLength = 512

// Close ends a connection. Code 0 is a normal close.
type Close struct {
	Code      uint16
	DstConnID protocol.ConnectionID
	Reason    string
}

// ParseClose decodes a CLOSE packet.
func ParseClose(b []byte) (Close, error) {
	body, err := checkTyped(b, TypeClose, TypeClose)
	if err != nil {
		return Close{}, err
	}
	if len(body) < CloseHeaderSize {
		return Close{}, errf("short CLOSE header")
	}
	if body[1] != 0 {
		return Close{}, errf("CLOSE flags set")
	}
	c := Close{
		Code:      binary.BigEndian.Uint16(body[2:]),
		DstConnID: protocol.ConnectionID(binary.BigEndian.Uint32(body[4:])),
	}
	n := int(binary.BigEndian.Uint16(body[8:]))
	if n > MaxReasonLength || len(body) != CloseHeaderSize+n {
		return Close{}, errf("CLOSE reason length %d", n)
	}
	c.Reason = string(body[CloseHeaderSize:])
	return c, nil
}

func (c *Close) reason() string {
	if len(c.Reason) > MaxReasonLength {
		return c.Reason[:MaxReasonLength]
	}
	return c.Reason
}

// Length returns the encoded size of c.
func (c *Close) Length() protocol.ByteCount {
	return protocol.ByteCount(CloseHeaderSize + len(c.reason()) + CRCSize)
}

// Append appends the encoded packet to b.
func (c *Close) Append(b []byte) []byte {
	start := len(b)
	r := c.reason()
	b = append(b, prefix(TypeClose), 0)
	b = binary.BigEndian.AppendUint16(b, c.Code)
	b = binary.BigEndian.AppendUint32(b, uint32(c.DstConnID))
	b = binary.BigEndian.AppendUint16(b, uint16(len(r)))
	b = append(b, r...)
	return appendCRC(b, start)
}
