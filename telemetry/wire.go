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

// decode parses f.buf.
func (f *frame) decode() error {
	f.notif.reset()
	f.sync, f.isUpdate = false, false
	b := f.buf
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		switch {
		case num == fRespUpdate && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errMalformed
			}
			if err := f.notif.decode(v); err != nil {
				return err
			}
			f.isUpdate = true
			b = b[n:]
		case num == fRespSync && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errMalformed
			}
			f.sync = v != 0
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errMalformed
			}
			b = b[n:]
		}
	}
	return nil
}

func (n *wireNotif) decode(b []byte) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return errMalformed
		}
		b = b[l:]
		switch {
		case num == fNotifTimestamp && typ == protowire.VarintType:
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return errMalformed
			}
			n.ts = int64(v)
			b = b[l:]
		case num == fNotifPrefix && typ == protowire.BytesType:
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return errMalformed
			}
			n.preFrom = len(n.elems)
			if err := n.decodePath(v); err != nil {
				return err
			}
			n.preN = len(n.elems) - n.preFrom
			n.hasPrefix = true
			b = b[l:]
		case num == fNotifUpdate && typ == protowire.BytesType:
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return errMalformed
			}
			if err := n.decodeUpdate(v); err != nil {
				return err
			}
			n.updateCount++
			b = b[l:]
		default:
			l := protowire.ConsumeFieldValue(num, typ, b)
			if l < 0 {
				return errMalformed
			}
			b = b[l:]
		}
	}
	return nil
}

func (n *wireNotif) decodePath(b []byte) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return errMalformed
		}
		b = b[l:]
		if num == fPathElem && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return errMalformed
			}
			if err := n.decodeElem(v); err != nil {
				return err
			}
			b = b[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(num, typ, b)
		if l < 0 {
			return errMalformed
		}
		b = b[l:]
	}
	return nil
}

func (n *wireNotif) decodeElem(b []byte) error {
	e := wireElem{kvFrom: len(n.kvs)}
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return errMalformed
		}
		b = b[l:]
		switch {
		case num == fElemName && typ == protowire.BytesType:
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return errMalformed
			}
			e.name = v
			b = b[l:]
		case num == fElemKey && typ == protowire.BytesType:
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return errMalformed
			}
			kv, err := decodeKV(v)
			if err != nil {
				return err
			}
			n.kvs = append(n.kvs, kv)
			e.kv++
			b = b[l:]
		default:
			l := protowire.ConsumeFieldValue(num, typ, b)
			if l < 0 {
				return errMalformed
			}
			b = b[l:]
		}
	}
	n.elems = append(n.elems, e)
	return nil
}

func decodeKV(b []byte) (wireKV, error) {
	var kv wireKV
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return kv, errMalformed
		}
		b = b[l:]
		if typ == protowire.BytesType && (num == 1 || num == 2) {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return kv, errMalformed
			}
			if num == 1 {
				kv.k = v
			} else {
				kv.v = v
			}
			b = b[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(num, typ, b)
		if l < 0 {
			return kv, errMalformed
		}
		b = b[l:]
	}
	return kv, nil
}

func (n *wireNotif) decodeUpdate(b []byte) error {
	u := wireUpdate{from: len(n.elems)}
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return errMalformed
		}
		b = b[l:]
		switch {
		case num == fUpdatePath && typ == protowire.BytesType:
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return errMalformed
			}
			u.from = len(n.elems)
			if err := n.decodePath(v); err != nil {
				return err
			}
			u.n = len(n.elems) - u.from
			b = b[l:]
		case num == fUpdateVal && typ == protowire.BytesType:
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return errMalformed
			}
			val, err := decodeVal(v)
			if err != nil {
				return err
			}
			u.val = val
			b = b[l:]
		default:
			l := protowire.ConsumeFieldValue(num, typ, b)
			if l < 0 {
				return errMalformed
			}
			b = b[l:]
		}
	}
	n.updates = append(n.updates, u)
	return nil
}

func decodeVal(b []byte) (wireVal, error) {
	var v wireVal
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return v, errMalformed
		}
		b = b[l:]
		var m int
		switch typ {
		case protowire.VarintType:
			v.u, m = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var x uint32
			x, m = protowire.ConsumeFixed32(b)
			v.u = math.Float64bits(float64(math.Float32frombits(x)))
		case protowire.Fixed64Type:
			v.u, m = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v.b, m = protowire.ConsumeBytes(b)
		default:
			m = protowire.ConsumeFieldValue(num, typ, b)
		}
		if m < 0 {
			return v, errMalformed
		}
		if num >= 1 && num <= 14 {
			v.kind = valKind(num)
		}
		b = b[m:]
	}
	return v, nil
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
