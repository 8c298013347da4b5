package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Message layout (big endian), HeaderLen bytes then the payload:
//
//	0  magic   uint32 "MPB1"
//	4  kind    uint8  (kindData, kindEnd, kindResult)
//	5  -       3 bytes, zero
//	8  session uint64 (random per client run)
//	16 seq     uint64 (per connection, from 0)
//	24 conn    uint16 (connection index)
//	26 conns   uint16 (connections in the run)
//	28 length  uint32 (payload bytes)
//	32 crc     uint32 CRC32C of the header (crc field zero) and the payload
//	36 -       4 bytes, zero
const (
	HeaderLen  = 40
	MaxMessage = 16 << 20
	magic      = 0x4d504231 // "MPB1"
)

type kind uint8

const (
	kindData   kind = 1
	kindEnd    kind = 2 // payload: messages sent (uint64), bytes sent (uint64)
	kindResult kind = 3 // payload: messages, bytes verified (uint64 each), errors (uint64)
	// kindProgress (server to client, on connection 0 every
	// progressEvery): what the server verified of the whole run so far,
	// as in kindResult; the client's progress lines show it.
	kindProgress kind = 4
	// kindPing (--lat, client to server) is echoed at once as kindPong,
	// same sequence number and size.
	kindPing kind = 5
	kindPong kind = 6
	kindLast      = kindPong
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is returned for a message that fails verification.
var ErrCorrupt = errors.New("bench: corrupt message")

type header struct {
	kind    kind
	session uint64
	seq     uint64
	conn    uint16
	conns   uint16
	length  uint32
}

// put writes h into the first HeaderLen bytes of msg, then the CRC over
// msg[:HeaderLen+h.length].
func (h header) put(msg []byte) {
	b := msg[:HeaderLen]
	clear(b)
	binary.BigEndian.PutUint32(b[0:], magic)
	b[4] = byte(h.kind)
	binary.BigEndian.PutUint64(b[8:], h.session)
	binary.BigEndian.PutUint64(b[16:], h.seq)
	binary.BigEndian.PutUint16(b[24:], h.conn)
	binary.BigEndian.PutUint16(b[26:], h.conns)
	binary.BigEndian.PutUint32(b[28:], h.length)
	crc := crc32.Checksum(msg[:HeaderLen+int(h.length)], castagnoli)
	binary.BigEndian.PutUint32(b[32:], crc)
}

// parseHeader reads a header without checking the CRC.
func parseHeader(b []byte) (header, error) {
	if len(b) < HeaderLen {
		return header{}, fmt.Errorf("%w: %d bytes, shorter than the header", ErrCorrupt, len(b))
	}
	if binary.BigEndian.Uint32(b) != magic {
		return header{}, fmt.Errorf("%w: bad magic %#x", ErrCorrupt, binary.BigEndian.Uint32(b))
	}
	h := header{
		kind:    kind(b[4]),
		session: binary.BigEndian.Uint64(b[8:]),
		seq:     binary.BigEndian.Uint64(b[16:]),
		conn:    binary.BigEndian.Uint16(b[24:]),
		conns:   binary.BigEndian.Uint16(b[26:]),
		length:  binary.BigEndian.Uint32(b[28:]),
	}
	if h.kind < kindData || h.kind > kindLast || h.length > MaxMessage-HeaderLen {
		return header{}, fmt.Errorf("%w: kind %d length %d", ErrCorrupt, h.kind, h.length)
	}
	return h, nil
}

// verify parses a whole message and checks its length and CRC.
func verify(msg []byte) (header, error) {
	h, err := parseHeader(msg)
	if err != nil {
		return h, err
	}
	if len(msg) != HeaderLen+int(h.length) {
		return h, fmt.Errorf("%w: %d bytes, header says %d", ErrCorrupt, len(msg), HeaderLen+int(h.length))
	}
	want := binary.BigEndian.Uint32(msg[32:])
	crc := crc32.Update(0, castagnoli, msg[:32])
	crc = crc32.Update(crc, castagnoli, []byte{0, 0, 0, 0})
	crc = crc32.Update(crc, castagnoli, msg[36:])
	if crc != want {
		return h, fmt.Errorf("%w: conn %d seq %d: crc %#x, want %#x", ErrCorrupt, h.conn, h.seq, crc, want)
	}
	return h, nil
}

// pattern is the payload source: a pseudo-random block; message seq takes
// its payload from offset seq*61 mod patternSpan, so no two neighbours are
// alike and misplaced data fails the CRC.
const patternSpan = 4096

func newPattern(size int) []byte {
	p := make([]byte, size+patternSpan)
	x := uint64(0x9e3779b97f4a7c15)
	for i := range p {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		p[i] = byte(x)
	}
	return p
}

// fillData builds data message seq into msg (len = message size).
func fillData(msg, pattern []byte, h header) {
	h.kind = kindData
	fillKind(msg, pattern, h)
}

// fillKind builds message seq of kind h.kind into msg.
func fillKind(msg, pattern []byte, h header) {
	off := int(h.seq*61) % patternSpan
	copy(msg[HeaderLen:], pattern[off:])
	h.length = uint32(len(msg) - HeaderLen)
	h.put(msg)
}

// counts is the payload of end and result messages.
type counts struct{ messages, bytes, errors uint64 }

func appendCounts(h header, c counts) []byte {
	msg := make([]byte, HeaderLen+24)
	binary.BigEndian.PutUint64(msg[HeaderLen:], c.messages)
	binary.BigEndian.PutUint64(msg[HeaderLen+8:], c.bytes)
	binary.BigEndian.PutUint64(msg[HeaderLen+16:], c.errors)
	h.length = 24
	h.put(msg)
	return msg
}

func parseCounts(msg []byte) (counts, error) {
	if len(msg) != HeaderLen+24 {
		return counts{}, fmt.Errorf("%w: counts message of %d bytes", ErrCorrupt, len(msg))
	}
	p := msg[HeaderLen:]
	return counts{binary.BigEndian.Uint64(p), binary.BigEndian.Uint64(p[8:]), binary.BigEndian.Uint64(p[16:])}, nil
}
