package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// Version is the wire format version this package speaks. It is the high
// nibble of a packet's first byte; the type is the low nibble.
const Version = 5

// ErrInvalid is wrapped by every parse error.
var ErrInvalid = errors.New("wire: invalid packet")

// Type is a packet type.
type Type uint8

// Packet types.
const (
	TypeData    Type = 1
	TypeAck     Type = 2
	TypeInit    Type = 3
	TypeInitAck Type = 4
	TypeClose   Type = 5
)

func (t Type) String() string {
	switch t {
	case TypeData:
		return "DATA"
	case TypeAck:
		return "ACK"
	case TypeInit:
		return "INIT"
	case TypeInitAck:
		return "INIT_ACK"
	case TypeClose:
		return "CLOSE"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Flag bits (byte 1).
const (
	FlagRetransmit byte = 0x80 // DATA: this packet resends data sent before
	FlagAckNow     byte = 0x40 // DATA: the receiver should acknowledge at once
	FlagNAK        byte = 0x10 // ACK: go-back-N receiver saw an out-of-order packet
)

// prefix returns the first byte of a packet of type t.
func prefix(t Type) byte { return Version<<4 | byte(t)&0x0f }

// CRCSize is the size of the trailing checksum.
const CRCSize = 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func errf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// PeekType checks the length and version of a datagram and returns its
// type, for dispatch. It does not verify the CRC: the Parse function of the
// type does, so each datagram is checksummed once.
func PeekType(b []byte) (Type, error) {
	if len(b) < 2+CRCSize {
		return 0, errf("short datagram (%d bytes)", len(b))
	}
	if b[0]>>4 != Version {
		return 0, errf("version %d", b[0]>>4)
	}
	return Type(b[0] & 0x0f), nil
}

// checkFrame verifies length, version and CRC.
func checkFrame(b []byte) error {
	if len(b) < 2+CRCSize {
		return errf("short datagram (%d bytes)", len(b))
	}
	if len(b) > int(protocol.MaxDatagramSize) {
		return errf("datagram of %d bytes, at most %d", len(b), protocol.MaxDatagramSize)
	}
	if b[0]>>4 != Version {
		return errf("version %d", b[0]>>4)
	}
	n := len(b) - CRCSize
	if crc32.Checksum(b[:n], castagnoli) != binary.BigEndian.Uint32(b[n:]) {
		return errf("bad checksum")
	}
	return nil
}

// checkTyped verifies the frame and its type, returning the body without CRC.
func checkTyped(b []byte, want, alt Type) ([]byte, error) {
	if err := checkFrame(b); err != nil {
		return nil, err
	}
	if t := Type(b[0] & 0x0f); t != want && t != alt {
		return nil, errf("type %d, want %d", uint8(t), uint8(want))
	}
	return b[:len(b)-CRCSize], nil
}

// appendCRC appends the CRC32C of b[start:].
func appendCRC(b []byte, start int) []byte {
	sum := crc32.Checksum(b[start:], castagnoli)
	return binary.BigEndian.AppendUint32(b, sum)
}

func crcOf(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
