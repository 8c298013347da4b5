package telemetry

import (
	"bytes"
	"math"
	"testing"

	pb "github.com/openconfig/gnmi/proto/gnmi"
	"google.golang.org/protobuf/proto"
)

func sampleResponses() []*pb.SubscribeResponse {
	elem := func(name string, kv ...string) *pb.PathElem {
		e := &pb.PathElem{Name: name}
		if len(kv) > 0 {
			e.Key = map[string]string{}
			for i := 0; i+1 < len(kv); i += 2 {
				e.Key[kv[i]] = kv[i+1]
			}
		}
		return e
	}
	return []*pb.SubscribeResponse{
		{Response: &pb.SubscribeResponse_SyncResponse{SyncResponse: true}},
		{Response: &pb.SubscribeResponse_Update{Update: &pb.Notification{
			Timestamp: 1_700_000_000_123_456_789, Atomic: true,
			Prefix: &pb.Path{Target: "sw1", Origin: "openconfig", Elem: []*pb.PathElem{elem("interfaces"), elem("interface", "name", "eth1"), elem("state"), elem("counters")}},
			Update: []*pb.Update{
				{Path: &pb.Path{Elem: []*pb.PathElem{elem("in-octets")}}, Val: &pb.TypedValue{Value: &pb.TypedValue_UintVal{UintVal: math.MaxUint64}}, Duplicates: 3},
				{Path: &pb.Path{Elem: []*pb.PathElem{elem("in-errors")}}, Val: &pb.TypedValue{Value: &pb.TypedValue_IntVal{IntVal: -4}}},
				{Path: &pb.Path{Elem: []*pb.PathElem{elem("x")}}, Val: &pb.TypedValue{Value: &pb.TypedValue_DoubleVal{DoubleVal: 2.5}}},
				//lint:ignore SA1019 deprecated fields still arrive from old targets; the decoder must cope
				{Path: &pb.Path{Elem: []*pb.PathElem{elem("y")}}, Val: &pb.TypedValue{Value: &pb.TypedValue_FloatVal{FloatVal: 1.5}}},
				{Path: &pb.Path{Elem: []*pb.PathElem{elem("z")}}, Val: &pb.TypedValue{Value: &pb.TypedValue_JsonIetfVal{JsonIetfVal: []byte(`"42"`)}}},
				{Path: &pb.Path{Elem: []*pb.PathElem{elem("q", "a", "1", "b", "2")}}, Val: &pb.TypedValue{Value: &pb.TypedValue_BoolVal{BoolVal: true}}},
				//lint:ignore SA1019 deprecated fields still arrive from old targets; the decoder must cope
				{Path: &pb.Path{Element: []string{"legacy"}}, Val: &pb.TypedValue{Value: &pb.TypedValue_StringVal{StringVal: "UP"}}},
			},
			Delete: []*pb.Path{{Elem: []*pb.PathElem{elem("gone")}}},
		}}},
		{Response: &pb.SubscribeResponse_Update{Update: &pb.Notification{Timestamp: 5}}},
	}
}

// TestFrameDecodeMatchesProto checks the wire decoder against the
// generated code on the same bytes.
func TestFrameDecodeMatchesProto(t *testing.T) {
	for i, r := range sampleResponses() {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		f := &frame{buf: b}
		if err := f.decode(); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if f.sync != r.GetSyncResponse() || f.isUpdate != (r.GetUpdate() != nil) {
			t.Fatalf("%d: sync %v update %v", i, f.sync, f.isUpdate)
		}
		n := r.GetUpdate()
		if n == nil {
			continue
		}
		w := &f.notif
		if w.ts != n.Timestamp || w.preN != len(n.GetPrefix().GetElem()) || len(w.updates) != len(n.Update) || w.updateCount != len(n.Update) {
			t.Fatalf("%d: ts %d prefix %d updates %d", i, w.ts, w.preN, len(w.updates))
		}
		for j, pe := range n.GetPrefix().GetElem() {
			if string(w.elems[w.preFrom+j].name) != pe.Name {
				t.Fatalf("prefix elem %d: %q", j, w.elems[w.preFrom+j].name)
			}
		}
		if w.preN < 2 {
			continue
		}
		if got := w.key(&w.elems[w.preFrom+1], "name"); w.preN > 1 && string(got) != "eth1" {
			t.Fatalf("key name = %q", got)
		}
		for j, u := range n.Update {
			wu := w.updates[j]
			if wu.n != len(u.GetPath().GetElem()) {
				t.Fatalf("update %d: %d elems", j, wu.n)
			}
			for k, pe := range u.GetPath().GetElem() {
				e := &w.elems[wu.from+k]
				if string(e.name) != pe.Name || e.kv != len(pe.Key) {
					t.Fatalf("update %d elem %d: %q %d keys", j, k, e.name, e.kv)
				}
				for kk, vv := range pe.Key {
					if string(w.key(e, kk)) != vv {
						t.Fatalf("key %s", kk)
					}
				}
			}
			v := wu.val
			switch x := u.Val.Value.(type) {
			case *pb.TypedValue_UintVal:
				if v.kind != kindUint || v.u != x.UintVal {
					t.Fatalf("uint %+v", v)
				}
			case *pb.TypedValue_IntVal:
				if v.kind != kindInt || int64(v.u) != x.IntVal {
					t.Fatalf("int %+v", v)
				}
			case *pb.TypedValue_DoubleVal:
				if v.kind != kindDouble || math.Float64frombits(v.u) != x.DoubleVal {
					t.Fatalf("double %+v", v)
				}
			case *pb.TypedValue_FloatVal:
				//lint:ignore SA1019 deprecated fields still arrive from old targets; the decoder must cope
				if v.kind != kindFloat || math.Float64frombits(v.u) != float64(x.FloatVal) {
					t.Fatalf("float %+v", v)
				}
			case *pb.TypedValue_JsonIetfVal:
				if v.kind != kindJSONIETF || string(v.b) != string(x.JsonIetfVal) {
					t.Fatalf("json %+v", v)
				}
			case *pb.TypedValue_BoolVal:
				if v.kind != kindBool || v.u != 1 {
					t.Fatalf("bool %+v", v)
				}
			case *pb.TypedValue_StringVal:
				if v.kind != kindString || string(v.b) != x.StringVal {
					t.Fatalf("string %+v", v)
				}
			}
		}
	}
}

func TestFrameDecodeRejectsTruncated(t *testing.T) {
	b, _ := proto.Marshal(sampleResponses()[1])
	for i := 1; i < len(b); i++ {
		f := &frame{buf: b[:i]}
		// Truncations inside a length-delimited field must fail; none may panic.
		_ = f.decode()
	}
	f := &frame{buf: b[:len(b)-1]}
	if err := f.decode(); err == nil {
		t.Fatal("truncated message accepted")
	}
}

func FuzzFrameDecode(f *testing.F) {
	for _, r := range sampleResponses() {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	p := newProcessor("sw1", []string{"eth1"}, DefaultMaxRate, procMetrics{}, nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		fr := &frame{buf: b}
		err := fr.decode()
		// What the generated decoder accepts, the wire decoder must accept
		// and read alike; it may accept more (it skips string validation).
		var ref pb.SubscribeResponse
		if proto.Unmarshal(b, &ref) == nil {
			if err != nil {
				t.Fatalf("generated decoder accepts, wire decoder says %v", err)
			}
			if canonical, _ := (proto.MarshalOptions{Deterministic: true}).Marshal(&ref); bytes.Equal(canonical, b) {
				n := ref.GetUpdate()
				if fr.sync != ref.GetSyncResponse() || fr.isUpdate != (n != nil) ||
					fr.notif.ts != n.GetTimestamp() || fr.notif.updateCount != len(n.GetUpdate()) || fr.notif.hasPrefix != (n.GetPrefix() != nil) {
					t.Fatalf("wire decoder read %+v (sync %v), generated %v", fr.notif, fr.sync, &ref)
				}
			}
		}
		if err == nil && fr.isUpdate {
			for _, s := range p.process(&fr.notif) {
				if r := s.Rates; r != nil && (r.InOctets < 0 || r.InOctets > DefaultMaxRate) {
					t.Fatalf("rate %v", r.InOctets)
				}
			}
		}
	})
}

// BenchmarkProcess measures decoding and processing one per-port counter
// notification (9 leaves) as gnmisim sends it.
func BenchmarkProcess(b *testing.B) {
	ifaces := []string{"eth1"}
	p := newProcessor("sw1", ifaces, DefaultMaxRate, procMetrics{}, nil)
	mk := func(ts int64, v uint64) []byte {
		var upd []*pb.Update
		for _, leaf := range []string{"in-octets", "out-octets", "in-pkts", "out-pkts", "in-errors", "in-discards", "out-discards", "in-fcs-errors", "interface-transitions"} {
			upd = append(upd, &pb.Update{Path: &pb.Path{Elem: []*pb.PathElem{{Name: leaf}}}, Val: &pb.TypedValue{Value: &pb.TypedValue_UintVal{UintVal: v}}})
		}
		r := &pb.SubscribeResponse{Response: &pb.SubscribeResponse_Update{Update: &pb.Notification{Timestamp: ts, Atomic: true,
			Prefix: &pb.Path{Target: "sw1", Elem: []*pb.PathElem{{Name: "interfaces"}, {Name: "interface", Key: map[string]string{"name": "eth1"}}, {Name: "state"}, {Name: "counters"}}},
			Update: upd}}}
		bb, _ := proto.Marshal(r)
		return bb
	}
	// Alternate timestamps/values so every notification yields a rate.
	msgs := make([][]byte, 1024)
	for i := range msgs {
		msgs[i] = mk(int64(i+1)*1e9, uint64(i)*1000)
	}
	f := &frame{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%len(msgs) == 0 {
			p.resetBaselines()
		}
		f.buf = append(f.buf[:0], msgs[i%len(msgs)]...)
		if err := f.decode(); err != nil {
			b.Fatal(err)
		}
		p.process(&f.notif)
	}
	b.ReportMetric(float64(b.N*9)/b.Elapsed().Seconds(), "updates/s")
}

// BenchmarkProcessProto is the same through the generated code, for comparison.
func BenchmarkProcessProto(b *testing.B) {
	upd := []*pb.Update{}
	for _, leaf := range []string{"in-octets", "out-octets", "in-pkts", "out-pkts", "in-errors", "in-discards", "out-discards", "in-fcs-errors", "interface-transitions"} {
		upd = append(upd, &pb.Update{Path: &pb.Path{Elem: []*pb.PathElem{{Name: leaf}}}, Val: &pb.TypedValue{Value: &pb.TypedValue_UintVal{UintVal: 7}}})
	}
	bb, _ := proto.Marshal(&pb.SubscribeResponse{Response: &pb.SubscribeResponse_Update{Update: &pb.Notification{Timestamp: 1, Atomic: true,
		Prefix: &pb.Path{Target: "sw1", Elem: []*pb.PathElem{{Name: "interfaces"}, {Name: "interface", Key: map[string]string{"name": "eth1"}}, {Name: "state"}, {Name: "counters"}}},
		Update: upd}}})
	b.ReportAllocs()
	for range b.N {
		var r pb.SubscribeResponse
		if err := proto.Unmarshal(bb, &r); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*9)/b.Elapsed().Seconds(), "updates/s")
}
