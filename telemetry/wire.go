package telemetry

import (
	"errors"
	"math"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The collector reads SubscribeResponses straight from their wire form into
// reused buffers (no message per leaf, no map per path element): decoding
// through the generated types spent most of the collector's CPU allocating.
// Only the fields the collector uses are kept; everything else is skipped.

var errMalformed = errors.New("telemetry: malformed gNMI message")

// Field numbers of gnmi.proto.
const (
	fRespUpdate = 1 // SubscribeResponse.update (Notification)
	fRespSync   = 3 // SubscribeResponse.sync_response

	fNotifTimestamp = 1
	fNotifPrefix    = 2
	fNotifUpdate    = 4

	fPathElem = 3 // Path.elem (PathElem)

	fElemName = 1
	fElemKey  = 2 // map entry: key = 1, value = 2

	fUpdatePath = 1
	fUpdateVal  = 3 // Update.val (TypedValue)
)

// TypedValue kinds are its oneof field numbers.
type valKind uint8

const (
	kindNone     valKind = 0
	kindString   valKind = 1
	kindInt      valKind = 2
	kindUint     valKind = 3
	kindBool     valKind = 4
	kindBytes    valKind = 5
	kindFloat    valKind = 6
	kindDecimal  valKind = 7
	kindLeafList valKind = 8
	kindAny      valKind = 9
	kindJSON     valKind = 10
	kindJSONIETF valKind = 11
	kindASCII    valKind = 12
	kindProto    valKind = 13
	kindDouble   valKind = 14
)

func (k valKind) String() string {
	switch k {
	case kindNone:
		return "none"
	case kindString:
		return "string_val"
	case kindInt:
		return "int_val"
	case kindUint:
		return "uint_val"
	case kindBool:
		return "bool_val"
	case kindFloat, kindDouble:
		return "float_val"
	case kindJSON:
		return "json_val"
	case kindJSONIETF:
		return "json_ietf_val"
	case kindASCII:
		return "ascii_val"
	}
	return "other"
}

type wireKV struct{ k, v []byte }

type wireElem struct {
	name       []byte
	kvFrom, kv int // n.kvs[kvFrom:kvFrom+kv]
}

type wireVal struct {
	kind valKind
	u    uint64 // int, uint, bool, float bits
	b    []byte // string, json, bytes
}

type wireUpdate struct {
	from, n int // n.elems[from:from+n]
	val     wireVal
}

// wireNotif is a decoded Notification. Its slices point into the frame it
// was decoded from and are reused by the next decode.
type wireNotif struct {
	ts          int64
	preFrom     int
	preN        int
	updates     []wireUpdate
	elems       []wireElem
	kvs         []wireKV
	hasPrefix   bool
	updateCount int
}

func (n *wireNotif) reset() {
	n.ts, n.preFrom, n.preN, n.hasPrefix, n.updateCount = 0, 0, 0, false, 0
	n.updates, n.elems, n.kvs = n.updates[:0], n.elems[:0], n.kvs[:0]
}

// key returns the value of key k of element e, or nil.
func (n *wireNotif) key(e *wireElem, k string) []byte {
	for _, kv := range n.kvs[e.kvFrom : e.kvFrom+e.kv] {
		if string(kv.k) == k {
			return kv.v
		}
	}
	return nil
}

// frame is a received SubscribeResponse in wire form.
type frame struct {
	buf   []byte
	notif wireNotif
	sync  bool
	// isUpdate is set when the response carried a notification.
	isUpdate bool
}

// fieldReader walks the fields of a protobuf message in wire form. After
// next returns true, num and typ name the field, and val (length-delimited)
// or u (varint, fixed32, fixed64) holds its value; other kinds are skipped
// over. Any malformation stops the walk and sets err.
type fieldReader struct {
	b   []byte
	num protowire.Number
	typ protowire.Type
	val []byte
	u   uint64
	err error
}

func (r *fieldReader) next() bool {
	if len(r.b) == 0 || r.err != nil {
		return false
	}
	// Fast path: a one-byte tag of a length-delimited field with a
	// one-byte length, the common case in gNMI notifications.
	if len(r.b) >= 2 && r.b[0]&0x87 == 2 && r.b[0] >= 8 && r.b[1] < 0x80 && int(r.b[1]) <= len(r.b)-2 {
		n := int(r.b[1]) + 2
		r.num, r.typ, r.val, r.b = protowire.Number(r.b[0]>>3), protowire.BytesType, r.b[2:n], r.b[n:]
		return true
	}
	return r.read()
}

func (r *fieldReader) read() bool {
	num, typ, n := protowire.ConsumeTag(r.b)
	if n < 0 {
		r.err = errMalformed
		return false
	}
	b := r.b[n:]
	switch typ {
	case protowire.VarintType:
		r.u, n = protowire.ConsumeVarint(b)
	case protowire.Fixed32Type:
		var x uint32
		x, n = protowire.ConsumeFixed32(b)
		r.u = uint64(x)
	case protowire.Fixed64Type:
		r.u, n = protowire.ConsumeFixed64(b)
	case protowire.BytesType:
		r.val, n = protowire.ConsumeBytes(b)
	default:
		n = protowire.ConsumeFieldValue(num, typ, b)
	}
	if n < 0 {
		r.err = errMalformed
		return false
	}
	r.b, r.num, r.typ = b[n:], num, typ
	return true
}

// is reports whether the current field is number num of wire type typ.
func (r *fieldReader) is(num protowire.Number, typ protowire.Type) bool {
	return r.num == num && r.typ == typ
}

// decode parses f.buf.
func (f *frame) decode() error {
	f.notif.reset()
	f.sync, f.isUpdate = false, false
	r := fieldReader{b: f.buf}
	for r.next() {
		switch {
		case r.is(fRespUpdate, protowire.BytesType):
			if err := f.notif.decode(r.val); err != nil {
				return err
			}
			f.isUpdate = true
		case r.is(fRespSync, protowire.VarintType):
			f.sync = r.u != 0
		}
	}
	return r.err
}

func (n *wireNotif) decode(b []byte) error {
	r := fieldReader{b: b}
	for r.next() {
		switch {
		case r.is(fNotifTimestamp, protowire.VarintType):
			n.ts = int64(r.u)
		case r.is(fNotifPrefix, protowire.BytesType):
			n.preFrom = len(n.elems)
			if err := n.decodePath(r.val); err != nil {
				return err
			}
			n.preN = len(n.elems) - n.preFrom
			n.hasPrefix = true
		case r.is(fNotifUpdate, protowire.BytesType):
			if err := n.decodeUpdate(r.val); err != nil {
				return err
			}
			n.updateCount++
		}
	}
	return r.err
}

func (n *wireNotif) decodePath(b []byte) error {
	r := fieldReader{b: b}
	for r.next() {
		if r.is(fPathElem, protowire.BytesType) {
			if err := n.decodeElem(r.val); err != nil {
				return err
			}
		}
	}
	return r.err
}

func (n *wireNotif) decodeElem(b []byte) error {
	e := wireElem{kvFrom: len(n.kvs)}
	r := fieldReader{b: b}
	for r.next() {
		switch {
		case r.is(fElemName, protowire.BytesType):
			e.name = r.val
		case r.is(fElemKey, protowire.BytesType):
			kv, err := decodeKV(r.val)
			if err != nil {
				return err
			}
			n.kvs = append(n.kvs, kv)
			e.kv++
		}
	}
	if r.err != nil {
		return r.err
	}
	n.elems = append(n.elems, e)
	return nil
}

func decodeKV(b []byte) (wireKV, error) {
	var kv wireKV
	r := fieldReader{b: b}
	for r.next() {
		switch {
		case r.is(1, protowire.BytesType):
			kv.k = r.val
		case r.is(2, protowire.BytesType):
			kv.v = r.val
		}
	}
	return kv, r.err
}

func (n *wireNotif) decodeUpdate(b []byte) error {
	u := wireUpdate{from: len(n.elems)}
	r := fieldReader{b: b}
	for r.next() {
		switch {
		case r.is(fUpdatePath, protowire.BytesType):
			u.from = len(n.elems)
			if err := n.decodePath(r.val); err != nil {
				return err
			}
			u.n = len(n.elems) - u.from
		case r.is(fUpdateVal, protowire.BytesType):
			val, err := decodeVal(r.val)
			if err != nil {
				return err
			}
			u.val = val
		}
	}
	if r.err != nil {
		return r.err
	}
	n.updates = append(n.updates, u)
	return nil
}

// decodeVal reads a TypedValue: its oneof field number is the kind; a
// float (fixed32) is widened to float64 bits.
func decodeVal(b []byte) (wireVal, error) {
	var v wireVal
	r := fieldReader{b: b}
	for r.next() {
		switch r.typ {
		case protowire.Fixed32Type:
			v.u = math.Float64bits(float64(math.Float32frombits(uint32(r.u))))
		case protowire.VarintType, protowire.Fixed64Type:
			v.u = r.u
		case protowire.BytesType:
			v.b = r.val
		}
		if r.num >= 1 && r.num <= 14 {
			v.kind = valKind(r.num)
		}
	}
	return v, r.err
}

// codec sends requests as protobuf and receives responses into a *frame.
type codec struct{}

var _ encoding.CodecV2 = codec{}

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, errors.New("telemetry: codec: not a proto message")
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	switch f := v.(type) {
	case *frame:
		n := data.Len()
		if cap(f.buf) < n {
			f.buf = make([]byte, n, n+n/4)
		}
		f.buf = f.buf[:n]
		data.CopyTo(f.buf)
		return nil
	case proto.Message:
		return proto.Unmarshal(data.Materialize(), f)
	}
	return errors.New("telemetry: codec: unexpected message type")
}
