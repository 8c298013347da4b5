package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// packet is what every message type implements.
type packet interface {
	Append([]byte) []byte
	Length() protocol.ByteCount
}

func samplePackets() map[string]packet {
	ack := &Ack{Flags: FlagNAK, DstConnID: 7, MaxData: 1 << 40, RateGrant: 25 * protocol.Mbps}
	ack.Blocks = []PathAck{
		{PathID: 3, Cumulative: 100, Largest: 400, ECNCE: 9, AckDelay: 1234 * time.Microsecond, Words: 4, Bitmap: [MaxSackWords]uint64{1, 0, 1 << 63, 5}},
		{PathID: 65535, Cumulative: 0xfffffff0, Largest: 0xffffffef, AckDelay: MaxAckDelay, Words: 0},
		{PathID: 1, Cumulative: 5, Largest: 1000, Words: 8, Bitmap: [MaxSackWords]uint64{1, 2, 3, 4, 5, 6, 7, 8}},
	}
	return map[string]packet{
		"data":        &Data{Flags: FlagRetransmit | FlagAckNow, Entropy: MaxEntropy, DstConnID: 0xdeadbeef, Seq: 0xfffffe, MessageID: 0xabcdef, Chunk: 1, TotalLength: 100000, Payload: bytes.Repeat([]byte{0xab}, 1442)},
		"data-empty":  &Data{DstConnID: 1, MessageID: 2},
		"ack":         ack,
		"keepalive":   &Ack{DstConnID: 7},
		"init":        &Handshake{Type: TypeInit, Mode: protocol.ModeMultipath, Plane: 3, Planes: 4, SrcConnID: 5, MaxDatagramSize: 1472, MaxData: 1 << 24, Instance: 0x0123456789abcdef},
		"init-ack":    &Handshake{Type: TypeInitAck, Mode: protocol.ModeGBN, Planes: 1, DstConnID: 5, SrcConnID: 6, MaxDatagramSize: 8972, MaxData: 1},
		"init-min":    &Handshake{Type: TypeInit, Mode: protocol.ModeMultipath, Planes: 2, SrcConnID: 9, MaxDatagramSize: protocol.MinDatagramSize},
		"close":       &Close{Code: 3, DstConnID: 8, Reason: "peer unreachable"},
		"close-empty": &Close{DstConnID: 8},
	}
}

// parseAny parses b with the parser of its type and re-encodes the result.
func parseAny(b []byte) ([]byte, error) {
	t, err := PeekType(b)
	if err != nil {
		return nil, err
	}
	var p packet
	switch t {
	case TypeData:
		d, err := ParseData(b)
		if err != nil {
			return nil, err
		}
		p = &d
	case TypeAck:
		a, err := ParseAck(b, nil)
		if err != nil {
			return nil, err
		}
		p = &a
	case TypeInit, TypeInitAck:
		h, err := ParseHandshake(b)
		if err != nil {
			return nil, err
		}
		p = &h
	case TypeClose:
		c, err := ParseClose(b)
		if err != nil {
			return nil, err
		}
		p = &c
	default:
		return nil, errf("unknown type %v", t)
	}
	out := p.Append(nil)
	if protocol.ByteCount(len(out)) != p.Length() {
		return nil, errors.New("length mismatch after parse")
	}
	return out, nil
}

func TestRoundTrip(t *testing.T) {
	for name, p := range samplePackets() {
		t.Run(name, func(t *testing.T) {
			b := p.Append([]byte{0xff, 0xfe}) // Append must not depend on what precedes
			b = b[2:]
			if got, want := protocol.ByteCount(len(b)), p.Length(); got != want {
				t.Fatalf("len(Append) = %d, Length() = %d", got, want)
			}
			out, err := parseAny(b)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if !bytes.Equal(out, b) {
				t.Fatalf("round trip differs:\n got %x\nwant %x", out, b)
			}
		})
	}
}

func TestTruncatedRejected(t *testing.T) {
	for name, p := range samplePackets() {
		t.Run(name, func(t *testing.T) {
			b := p.Append(nil)
			for n := 0; n < len(b); n++ {
				if _, err := parseAny(b[:n]); !errors.Is(err, ErrInvalid) {
					t.Fatalf("prefix of %d/%d bytes accepted (err %v)", n, len(b), err)
				}
				// Also with a valid CRC over the truncated body: the length
				// fields must catch it. A DATA payload's length is the
				// datagram's, so a shorter payload is a valid packet (the
				// receiver checks it against the chunk size).
				if n < 2 || n >= len(b)-CRCSize {
					continue
				}
				if _, ok := p.(*Data); ok && n >= DataHeaderSize {
					continue
				}
				fixed := append([]byte(nil), b[:n]...)
				fixed = binary.BigEndian.AppendUint32(fixed, crcOf(fixed))
				if _, err := parseAny(fixed); !errors.Is(err, ErrInvalid) {
					t.Fatalf("re-checksummed prefix of %d/%d bytes accepted", n, len(b))
				}
			}
		})
	}
}

func TestCorruptionRejected(t *testing.T) {
	for name, p := range samplePackets() {
		b := p.Append(nil)
		for i := range b {
			c := append([]byte(nil), b...)
			c[i] ^= 0x04
			if _, err := parseAny(c); err == nil {
				t.Fatalf("%s: flipped bit in byte %d accepted", name, i)
			}
		}
	}
}

func TestPathAckReceived(t *testing.T) {
	a := PathAck{Cumulative: 10, Largest: 400, Words: 4}
	a.Bitmap[0] = 1 << 2  // 397
	a.Bitmap[3] = 1 << 63 // 400-1-255 = 144
	type res struct{ rcvd, known bool }
	for pn, want := range map[protocol.PacketNumber]res{
		9: {true, true}, 10: {false, false}, 143: {false, false}, 144: {true, true}, 145: {false, true},
		397: {true, true}, 398: {false, true}, 400: {true, true}, 401: {false, true},
	} {
		if r, k := a.Received(pn); r != want.rcvd || k != want.known {
			t.Errorf("Received(%d) = %v,%v, want %+v", pn, r, k, want)
		}
	}
}

func TestDataFields(t *testing.T) {
	d := &Data{Flags: FlagAckNow, Entropy: 5, DstConnID: 2, Seq: 3, MessageID: 4, Chunk: 7, TotalLength: 10, Payload: []byte("abc")}
	b := d.Append(nil)
	if len(b) != DataOverhead+3 {
		t.Fatalf("%d bytes, want %d", len(b), DataOverhead+3)
	}
	got, err := ParseData(b)
	if err != nil || got.Entropy != 5 || got.Flags != FlagAckNow || got.Seq != 3 || got.MessageID != 4 || got.Chunk != 7 || string(got.Payload) != "abc" {
		t.Fatalf("got %+v, %v", got, err)
	}
	// Sequence numbers, message ids and chunk indexes travel as 24 bits.
	d.Seq, d.MessageID, d.Chunk = 0x12345678, 0x9abcdef0, 0x1000001
	if got, err := ParseData(d.Append(nil)); err != nil || got.Seq != 0x345678 || got.MessageID != 0xbcdef0 || got.Chunk != 1 {
		t.Fatalf("got %+v, %v", got, err)
	}
	// A payload longer than the whole message.
	d.TotalLength = 2
	if _, err := ParseData(d.Append(nil)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("DATA longer than its message accepted: %v", err)
	}
	// Another version.
	b[0] = 1<<4 | byte(TypeData)
	b = binary.BigEndian.AppendUint32(b[:len(b)-CRCSize], crcOf(b[:len(b)-CRCSize]))
	if _, err := PeekType(b); !errors.Is(err, ErrInvalid) {
		t.Fatalf("version 1 accepted: %v", err)
	}
}

func BenchmarkParseData(b *testing.B) {
	d := &Data{Entropy: 1, DstConnID: 2, Seq: 3, MessageID: 4, TotalLength: 1446, Payload: make([]byte, 1446)}
	pkt := d.Append(nil)
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	for b.Loop() {
		if _, err := ParseData(pkt); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, p := range samplePackets() {
		f.Add(p.Append(nil))
	}
	f.Add([]byte{})
	f.Add([]byte{Version<<4 | 2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := parseAny(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error not wrapping ErrInvalid: %v", err)
			}
			return
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("accepted packet does not re-encode identically:\n in %x\nout %x", b, out)
		}
	})
}

// FuzzParseUnchecked fuzzes the parsers past the checksum: the fuzzer's
// input gets a valid CRC appended, so the length and field checks are what
// is exercised.
func FuzzParseUnchecked(f *testing.F) {
	for _, p := range samplePackets() {
		b := p.Append(nil)
		f.Add(b[:len(b)-CRCSize])
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		b := binary.BigEndian.AppendUint32(append([]byte(nil), body...), crcOf(body))
		out, err := parseAny(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error not wrapping ErrInvalid: %v", err)
			}
			return
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("accepted packet does not re-encode identically:\n in %x\nout %x", b, out)
		}
	})
}

func TestExpand24(t *testing.T) {
	for _, c := range []struct{ low, next, want uint32 }{
		{5, 0, 5},
		{0xffffff, 0, 0xffffffff},          // just below the expected: a late packet
		{0x7fffff, 0, 0x7fffff},            // 2^23 - 1 ahead
		{0x800000, 0, 0xff800000},          // 2^23 ahead reads as 2^23 behind
		{0x000002, 0x00fffffe, 0x01000002}, // across a 24-bit boundary
		{0xfffffd, 0x01000002, 0x00fffffd},
		{0x000001, 0xffffffff, 0x00000001}, // across the 32-bit wrap
		{0xabcdef, 0x12abcdef, 0x12abcdef},
	} {
		if got := Expand24(c.low, c.next); got != c.want {
			t.Errorf("Expand24(%#x, %#x) = %#x, want %#x", c.low, c.next, got, c.want)
		}
	}
	// Every value within 2^23 of next comes back from its low 24 bits.
	for _, next := range []uint32{0, 1 << 23, 0xfffff000, 0x12345678} {
		for d := int64(-1 << 23); d < 1<<23; d += 4099 {
			v := next + uint32(d)
			if got := Expand24(v&0xffffff, next); got != v {
				t.Fatalf("Expand24(%#x, %#x) = %#x, want %#x", v&0xffffff, next, got, v)
			}
		}
	}
}

func TestOversizedRejected(t *testing.T) {
	d := &Data{DstConnID: 1, TotalLength: 9000, Payload: make([]byte, int(protocol.MaxDatagramSize)-DataOverhead+1)}
	if _, err := ParseData(d.Append(nil)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("DATA datagram over %d bytes accepted: %v", protocol.MaxDatagramSize, err)
	}
	d.Payload = d.Payload[:len(d.Payload)-1]
	if _, err := ParseData(d.Append(nil)); err != nil {
		t.Fatalf("largest DATA datagram rejected: %v", err)
	}
}

// TestHandshakeDatagramSize: the maximum datagram size an end announces is
// what the other end sends at most, so one below the smallest usable
// (MinDatagramSize: chunks must leave room for the header) is rejected.
func TestHandshakeDatagramSize(t *testing.T) {
	for _, tc := range []struct {
		size protocol.ByteCount
		ok   bool
	}{
		{0, false},
		{protocol.MinDatagramSize - 1, false},
		{protocol.MinDatagramSize, true},
		{protocol.DefaultMaxDatagramSize, true},
		{protocol.MaxDatagramSize, true},
	} {
		h := &Handshake{Type: TypeInit, Mode: protocol.ModeMultipath, Planes: 1, SrcConnID: 1, MaxDatagramSize: tc.size}
		got, err := ParseHandshake(h.Append(nil))
		if tc.ok && (err != nil || got.MaxDatagramSize != tc.size) {
			t.Errorf("max datagram size %d: parsed %d, %v", tc.size, got.MaxDatagramSize, err)
		}
		if !tc.ok && !errors.Is(err, ErrInvalid) {
			t.Errorf("max datagram size %d accepted: %v", tc.size, err)
		}
	}
}

// Several ACK packets packed in one datagram split at AckLength and parse
// one by one; a truncated last one or a non-ACK tail is an error.
func TestPackedAcksSplit(t *testing.T) {
	acks := []*Ack{samplePackets()["ack"].(*Ack), {DstConnID: 9}, {DstConnID: 11, MaxData: 5, Blocks: []PathAck{{PathID: 2, Cumulative: 1, Largest: 3}}}}
	var dgram []byte
	for _, a := range acks {
		dgram = a.Append(dgram)
	}
	var got []protocol.ConnectionID
	for buf := dgram; len(buf) > 0; {
		n, err := AckLength(buf)
		if err != nil {
			t.Fatalf("after %d ACKs: %v", len(got), err)
		}
		a, err := ParseAck(buf[:n], nil)
		if err != nil {
			t.Fatalf("ACK %d: %v", len(got), err)
		}
		if n != int(a.Length()) {
			t.Fatalf("ACK %d: AckLength %d, Length %d", len(got), n, a.Length())
		}
		got = append(got, a.DstConnID)
		buf = buf[n:]
	}
	if len(got) != 3 || got[0] != 7 || got[1] != 9 || got[2] != 11 {
		t.Fatalf("connections %v, want [7 9 11]", got)
	}
	if _, err := AckLength(dgram[:len(dgram)-1][int(acks[0].Length())+int(acks[1].Length()):]); !errors.Is(err, ErrInvalid) {
		t.Fatalf("truncated last ACK: %v", err)
	}
	tail := (&Close{DstConnID: 1}).Append(acks[1].Append(nil))
	n, err := AckLength(tail)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseAck(tail[n:], nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a CLOSE after an ACK parsed as an ACK: %v", err)
	}
}

// AckLength never reads past its input and agrees with ParseAck on every
// ACK that parses.
func FuzzAckLength(f *testing.F) {
	f.Add(samplePackets()["ack"].Append(nil))
	f.Add((&Ack{DstConnID: 7}).Append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := AckLength(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error not wrapping ErrInvalid: %v", err)
			}
			return
		}
		if n <= 0 || n > len(b) {
			t.Fatalf("length %d of %d bytes", n, len(b))
		}
		if a, err := ParseAck(b[:n], nil); err == nil && int(a.Length()) != n {
			t.Fatalf("AckLength %d, parsed ACK's length %d", n, a.Length())
		}
	})
}
