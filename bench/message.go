package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Message layout (big endian), HeaderLen bytes then the payload:
//
//	0  magic   uint32 "MPB2"
//	4  kind    uint8  (kindData ... kindPong)
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
	magic      = 0x4d504232 // "MPB2": the run's end and result are per session
)

type kind uint8

const (
	kindData kind = 1
	// kindEnd (client to server, once per run, on any one live
	// connection): for each connection of the run, in index order, the
	// messages and bytes it sent and whether it failed (uint64 each:
	// counts with errors = 1 for failed). One message for the run, not one
	// per connection: at 4,000 connections, 4,000 ends and results at once
	// held back the last data messages (about 60 ms of an 8 s incast).
	kindEnd kind = 2
	// kindResult (server to client, on the connection the end came on,
	// once every connection's data arrived or failed): for each
	// connection, the messages and bytes verified and the errors.
	kindResult kind = 3
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
// zeroCRC stands for the CRC field while the CRC is computed.
var zeroCRC [4]byte

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
	crc = crc32.Update(crc, castagnoli, zeroCRC[:])
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

// counts is what end, result and progress messages carry per connection.
type counts struct{ messages, bytes, errors uint64 }

// failedEnd marks a connection that failed in an end message (errors).
const failedEnd = 1

// appendCounts builds a progress message: the run's counts.
func appendCounts(h header, c counts) []byte { return appendCountsList(h, []counts{c}) }

// appendCountsList builds a message carrying one counts per connection.
func appendCountsList(h header, cs []counts) []byte {
	msg := make([]byte, HeaderLen+24*len(cs))
	for i, c := range cs {
		p := msg[HeaderLen+24*i:]
		binary.BigEndian.PutUint64(p, c.messages)
		binary.BigEndian.PutUint64(p[8:], c.bytes)
		binary.BigEndian.PutUint64(p[16:], c.errors)
	}
	h.length = uint32(24 * len(cs))
	h.put(msg)
	return msg
}

// parseCountsList reads the n counts of an end or result message.
func parseCountsList(msg []byte, n int) ([]counts, error) {
	if len(msg) != HeaderLen+24*n {
		return nil, fmt.Errorf("%w: %d bytes of counts for %d connections", ErrCorrupt, len(msg)-HeaderLen, n)
	}
	cs := make([]counts, n)
	for i := range cs {
		p := msg[HeaderLen+24*i:]
		cs[i] = counts{binary.BigEndian.Uint64(p), binary.BigEndian.Uint64(p[8:]), binary.BigEndian.Uint64(p[16:])}
	}
	return cs, nil
}

// parseCounts reads a progress message.
func parseCounts(msg []byte) (counts, error) {
	cs, err := parseCountsList(msg, 1)
	if err != nil {
		return counts{}, err
	}
	return cs[0], nil
}
