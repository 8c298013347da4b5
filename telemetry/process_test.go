package telemetry

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	pb "github.com/openconfig/gnmi/proto/gnmi"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/planes"
)

func TestCounterStep(t *testing.T) {
	const sec = int64(time.Second)
	tests := []struct {
		name             string
		prev, v          uint64
		dt               int64
		wantRate         float64
		ok, reset, stale bool
	}{
		{name: "increase", prev: 1000, v: 3000, dt: 2 * sec, wantRate: 1000, ok: true},
		{name: "no change", prev: 1000, v: 1000, dt: sec, wantRate: 0, ok: true},
		{name: "wrap at 2^64", prev: math.MaxUint64 - 499, v: 500, dt: sec, wantRate: 1000, ok: true},
		{name: "reset to zero", prev: 1 << 40, v: 0, dt: sec, reset: true},
		{name: "reset to small", prev: 5000, v: 10, dt: sec, reset: true},
		{name: "absurd jump", prev: 5000, v: 5000 + 1<<60, dt: sec, reset: true},
		{name: "same timestamp", prev: 5000, v: 6000, dt: 0, stale: true},
		{name: "older timestamp", prev: 5000, v: 6000, dt: -sec, stale: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := counter{}
			base := int64(1e18)
			if _, ok, _, _ := c.step(tt.prev, base, DefaultMaxRate); ok {
				t.Fatal("first value gave a rate")
			}
			_, ok, reset, stale := c.step(tt.v, base+tt.dt, DefaultMaxRate)
			if ok != tt.ok || reset != tt.reset || stale != tt.stale {
				t.Fatalf("ok, reset, stale = %v %v %v, want %v %v %v", ok, reset, stale, tt.ok, tt.reset, tt.stale)
			}
			if ok && math.Abs(c.rate-tt.wantRate) > 1e-9 {
				t.Fatalf("rate %v, want %v", c.rate, tt.wantRate)
			}
			if c.rate < 0 || c.rate > DefaultMaxRate {
				t.Fatalf("rate %v out of bounds", c.rate)
			}
			if stale && c.v != tt.prev {
				t.Fatal("a stale update moved the baseline")
			}
		})
	}
}

// leafUpd is an update with a relative path like "state/counters/in-octets".
func leafUpd(path string, v *pb.TypedValue) *pb.Update {
	p := &pb.Path{}
	for _, e := range strings.Split(path, "/") {
		p.Elem = append(p.Elem, &pb.PathElem{Name: e})
	}
	return &pb.Update{Path: p, Val: v}
}

func ifPrefix(first, iface string) *pb.Path {
	return &pb.Path{Target: "sw1", Elem: []*pb.PathElem{{Name: first}, {Name: "interface", Key: map[string]string{"name": iface}}}}
}

func u64(v uint64) *pb.TypedValue { return &pb.TypedValue{Value: &pb.TypedValue_UintVal{UintVal: v}} }
func str(v string) *pb.TypedValue {
	return &pb.TypedValue{Value: &pb.TypedValue_StringVal{StringVal: v}}
}

func counters(ts int64, iface string, octets uint64) *pb.Notification {
	return &pb.Notification{Timestamp: ts, Prefix: ifPrefix("interfaces", iface), Update: []*pb.Update{
		leafUpd("state/counters/in-octets", u64(octets)),
		leafUpd("state/counters/out-octets", u64(2*octets)),
		leafUpd("state/counters/in-errors", u64(0)),
		leafUpd("state/counters/interface-transitions", u64(3)),
		leafUpd("state/counters/some-vendor-leaf", str("x")),
	}}
}

// notification runs a notification through the wire decoder and the processor.
func (p *processor) notification(n *pb.Notification) []planes.InterfaceSample {
	b, err := proto.Marshal(&pb.SubscribeResponse{Response: &pb.SubscribeResponse_Update{Update: n}})
	if err != nil {
		panic(err)
	}
	f := &frame{buf: b}
	if err := f.decode(); err != nil || !f.isUpdate {
		panic(fmt.Sprintf("decode: %v", err))
	}
	return p.process(&f.notif)
}

func newTestProcessor(t *testing.T) (*processor, prometheus.Counter, prometheus.Counter, prometheus.Counter) {
	mm := prometheus.NewCounter(prometheus.CounterOpts{Name: "mm"})
	st := prometheus.NewCounter(prometheus.CounterOpts{Name: "st"})
	rs := prometheus.NewCounter(prometheus.CounterOpts{Name: "rs"})
	p := newProcessor("sw1", []string{"eth1", "eth2"}, DefaultMaxRate, procMetrics{typeMismatch: mm, stale: st, reset: rs}, testenv.Logger(t))
	return p, mm, st, rs
}

func TestProcessorRates(t *testing.T) {
	p, mm, st, rs := newTestProcessor(t)
	sec := int64(time.Second)
	t0 := int64(1_700_000_000) * sec

	if b := p.notification(counters(t0, "eth1", 1000)); len(b) != 0 {
		t.Fatalf("first values gave samples: %+v", b)
	}
	b := p.notification(counters(t0+sec, "eth1", 3000))
	if len(b) != 1 || b[0].Rates == nil || b[0].Rates.InOctets != 2000 || b[0].Rates.OutOctets != 4000 || b[0].Rates.Interval != time.Second {
		t.Fatalf("got %+v", b)
	}
	if b[0].Oper != "" || b[0].Switch != "sw1" || b[0].Interface != "eth1" || !b[0].At.Equal(time.Unix(0, t0+sec)) {
		t.Fatalf("sample %+v", b[0])
	}
	// Out of order: ignored, no sample.
	if b := p.notification(counters(t0+sec/2, "eth1", 2000)); len(b) != 0 {
		t.Fatalf("stale notification gave %+v", b)
	}
	if value(st) == 0 {
		t.Fatal("stale not counted")
	}
	// Reboot: lower values give no rate for that interval, then rates again.
	if b := p.notification(counters(t0+2*sec, "eth1", 10)); len(b) != 0 {
		t.Fatalf("reset gave %+v", b)
	}
	if value(rs) == 0 {
		t.Fatal("reset not counted")
	}
	if b := p.notification(counters(t0+3*sec, "eth1", 110)); len(b) != 1 || b[0].Rates.InOctets != 100 {
		t.Fatalf("after reset got %+v", b)
	}
	// An interface not in the topology is ignored.
	if b := p.notification(counters(t0+3*sec, "eth9", 1)); len(b) != 0 {
		t.Fatalf("unexpected interface gave %+v", b)
	}
	// A new stream forgets the baselines.
	p.resetBaselines()
	if b := p.notification(counters(t0+4*sec, "eth1", 1<<50)); len(b) != 0 {
		t.Fatalf("first values of a new stream gave %+v", b)
	}
	if value(mm) != 0 {
		t.Fatal("vendor leaf counted as type mismatch")
	}
}

func TestProcessorOperAndPaths(t *testing.T) {
	p, mm, _, _ := newTestProcessor(t)
	ts := int64(1_700_000_000_000_000_000)
	cases := []struct {
		name string
		n    *pb.Notification
		want planes.OperStatus // "" = no sample
	}{
		{"leaf under prefix", &pb.Notification{Timestamp: ts, Prefix: ifPrefix("interfaces", "eth1"),
			Update: []*pb.Update{leafUpd("state/oper-status", str("UP"))}}, planes.OperUp},
		{"full path, no prefix", &pb.Notification{Timestamp: ts + 1, Update: []*pb.Update{{
			Path: &pb.Path{Elem: []*pb.PathElem{{Name: "interfaces"}, {Name: "interface", Key: map[string]string{"name": "eth1"}}, {Name: "state"}, {Name: "oper-status"}}},
			Val:  str("DOWN")}}}, planes.OperDown},
		{"module-qualified, json_ietf", &pb.Notification{Timestamp: ts + 2, Prefix: ifPrefix("openconfig-interfaces:interfaces", "eth1"),
			Update: []*pb.Update{leafUpd("state/oper-status", &pb.TypedValue{Value: &pb.TypedValue_JsonIetfVal{JsonIetfVal: []byte(`"openconfig-interfaces:LOWER_LAYER_DOWN"`)}})}}, "LOWER_LAYER_DOWN"},
		{"older oper-status ignored", &pb.Notification{Timestamp: ts, Prefix: ifPrefix("interfaces", "eth1"),
			Update: []*pb.Update{leafUpd("state/oper-status", str("UP"))}}, ""},
		{"integer oper-status", &pb.Notification{Timestamp: ts + 3, Prefix: ifPrefix("interfaces", "eth1"),
			Update: []*pb.Update{leafUpd("state/oper-status", &pb.TypedValue{Value: &pb.TypedValue_IntVal{IntVal: 1}})}}, ""},
		{"unknown enum", &pb.Notification{Timestamp: ts + 4, Prefix: ifPrefix("interfaces", "eth1"),
			Update: []*pb.Update{leafUpd("state/oper-status", str("SIDEWAYS"))}}, ""},
		{"unknown path", &pb.Notification{Timestamp: ts + 5, Prefix: ifPrefix("lldp", "eth1"),
			Update: []*pb.Update{leafUpd("state/oper-status", str("DOWN"))}}, ""},
		{"admin-status is not oper-status", &pb.Notification{Timestamp: ts + 6, Prefix: ifPrefix("interfaces", "eth1"),
			Update: []*pb.Update{leafUpd("state/admin-status", str("DOWN"))}}, ""},
		{"short path", &pb.Notification{Timestamp: ts + 7, Update: []*pb.Update{leafUpd("interfaces", str("DOWN"))}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := p.notification(c.n)
			switch {
			case c.want == "" && len(b) != 0:
				t.Fatalf("want no sample, got %+v", b)
			case c.want != "" && (len(b) != 1 || b[0].Oper != c.want):
				t.Fatalf("want %s, got %+v", c.want, b)
			}
		})
	}
	if got := value(mm); got != 2 {
		t.Fatalf("type mismatches %v, want 2", got)
	}
	if len(p.mismatch) != 1 {
		t.Fatalf("logged paths %v, want one (oper-status, once)", p.mismatch)
	}
	if m := p.missing(); len(m) != 1 || m[0] != "eth2" {
		t.Fatalf("missing %v, want [eth2]", m)
	}
}

func TestProcessorQueuesAndGarbage(t *testing.T) {
	p, mm, _, _ := newTestProcessor(t)
	sec := int64(time.Second)
	t0 := int64(1_700_000_000) * sec
	q := func(ts int64, name string, ecn *pb.TypedValue) *pb.Notification {
		return &pb.Notification{Timestamp: ts, Atomic: true, Prefix: &pb.Path{Elem: []*pb.PathElem{
			{Name: "qos"}, {Name: "interfaces"}, {Name: "interface", Key: map[string]string{"interface-id": "eth2"}},
			{Name: "output"}, {Name: "queues"}, {Name: "queue", Key: map[string]string{"name": name}}, {Name: "state"}}},
			Update: []*pb.Update{leafUpd("ecn-marked-pkts", ecn), leafUpd("dropped-pkts", u64(0)), leafUpd("max-queue-len", u64(9))}}
	}
	for _, n := range []*pb.Notification{q(t0, "q0", u64(100)), q(t0, "q1", u64(100)), counters(t0, "eth2", 1),
		q(t0+sec, "q0", u64(150)), q(t0+sec, "q1", u64(125))} {
		if b := p.notification(n); len(b) != 0 {
			t.Fatalf("queue counters or first values gave a sample: %+v", b)
		}
	}
	// The interface's counters carry the queues' summed rates.
	b := p.notification(counters(t0+sec, "eth2", 101))
	if len(b) != 1 || b[0].Rates.ECNMarked != 75 || b[0].Rates.InOctets != 100 {
		t.Fatalf("queues summed: got %+v", b)
	}
	// Garbage: wrong types are counted, never a sample or a rate.
	if b := p.notification(q(t0+2*sec, "q0", str("garbage"))); len(b) != 0 {
		t.Fatalf("garbage queue value: got %+v", b)
	}
	if value(mm) != 1 {
		t.Fatal("garbage not counted")
	}
	bad := &pb.Notification{Timestamp: t0 + 3*sec, Prefix: ifPrefix("interfaces", "eth2"), Update: []*pb.Update{
		leafUpd("state/counters/in-octets", &pb.TypedValue{Value: &pb.TypedValue_BoolVal{BoolVal: true}}),
		leafUpd("state/counters/out-octets", &pb.TypedValue{Value: &pb.TypedValue_IntVal{IntVal: -5}}),
		leafUpd("state/counters/in-pkts", &pb.TypedValue{Value: &pb.TypedValue_JsonIetfVal{JsonIetfVal: []byte(`"12"`)}}),
	}}
	b = p.notification(bad)
	for _, s := range b {
		if s.Oper != "" {
			t.Fatalf("garbage made an oper-status: %+v", s)
		}
	}
	if value(mm) != 3 {
		t.Fatalf("mismatches %v, want 3", value(mm))
	}
}

func TestBackoff(t *testing.T) {
	min, max := 100*time.Millisecond, 2*time.Second
	for n := range 12 {
		nominal := min << n
		if nominal > max {
			nominal = max
		}
		lo := backoff(n, min, max, 0)
		hi := backoff(n, min, max, 0.999999)
		if lo != nominal/2 || hi > nominal || hi < nominal*99/100 {
			t.Fatalf("attempt %d: [%v, %v], nominal %v", n, lo, hi, nominal)
		}
	}
	if d := backoff(1000, min, max, 0.5); d > max || d < max/2 {
		t.Fatalf("huge attempt: %v", d)
	}
}

func TestConfig(t *testing.T) {
	c, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.SampleInterval != time.Second || c.SilenceTimeout != 3*time.Second || c.BackoffMax != 30*time.Second || c.Encoding != "proto" {
		t.Fatalf("defaults %+v", c)
	}
	for _, bad := range []Config{
		{BackoffMin: time.Second, BackoffMax: time.Millisecond},
		{Encoding: "xml"},
		{SampleInterval: time.Second, SilenceTimeout: time.Millisecond},
	} {
		if _, err := New(bad, &recorder{}, nil); err == nil {
			t.Fatalf("%+v accepted", bad)
		}
	}
}

// value reads a counter or gauge.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}
