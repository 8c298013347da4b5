package telemetry

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/openconfig/gnmi/cache"
	pb "github.com/openconfig/gnmi/proto/gnmi"
	"github.com/openconfig/gnmi/subscribe"
	"google.golang.org/grpc"

	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/planes"
)

// referenceTarget serves OpenConfig's reference Subscribe server over a
// cache the test fills by hand, one leaf per notification as a generic
// target would send them.
type referenceTarget struct {
	c    *cache.Cache
	addr string
}

func startReference(t *testing.T, name string) *referenceTarget {
	t.Helper()
	c := cache.New([]string{name})
	srv, err := subscribe.NewServer(c)
	if err != nil {
		t.Fatal(err)
	}
	c.SetClient(srv.Update)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterGNMIServer(g, srv)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return &referenceTarget{c: c, addr: lis.Addr().String()}
}

// leaf puts one leaf, given by its full path ("interfaces/interface[name=eth1]/state/oper-status").
func (r *referenceTarget) leaf(t *testing.T, target string, ts time.Time, path string, v *pb.TypedValue) {
	t.Helper()
	p := &pb.Path{}
	for _, e := range strings.Split(path, "/") {
		name, key, ok := strings.Cut(e, "[")
		pe := &pb.PathElem{Name: name}
		if ok {
			k, val, _ := strings.Cut(strings.TrimSuffix(key, "]"), "=")
			pe.Key = map[string]string{k: val}
		}
		p.Elem = append(p.Elem, pe)
	}
	n := &pb.Notification{Timestamp: ts.UnixNano(), Prefix: &pb.Path{Target: target}, Update: []*pb.Update{{Path: p, Val: v}}}
	if err := r.c.GnmiUpdate(n); err != nil {
		t.Fatal(err)
	}
}

func TestAgainstReferenceSubscribeServer(t *testing.T) {
	ref := startReference(t, "leaf1")
	t0 := time.Now()
	counters := func(ts time.Time, iface string, octets uint64) {
		ref.leaf(t, "leaf1", ts, "qos/interfaces/interface[interface-id="+iface+"]/output/queues/queue[name=BE1]/state/ecn-marked-pkts", u64(octets/10))
		for _, leaf := range []string{"in-octets", "out-octets", "in-pkts", "out-pkts", "in-errors", "in-discards", "out-discards", "in-fcs-errors"} {
			ref.leaf(t, "leaf1", ts, "interfaces/interface[name="+iface+"]/state/counters/"+leaf, u64(octets))
		}
	}
	for _, iface := range []string{"Ethernet0", "Ethernet4"} {
		ref.leaf(t, "leaf1", t0, "interfaces/interface[name="+iface+"]/state/oper-status", str("UP"))
		ref.leaf(t, "leaf1", t0, "interfaces/interface[name="+iface+"]/state/admin-status", str("UP"))
		counters(t0, iface, 1000)
	}
	// A leaf of an interface the topology does not know, and an LLDP leaf.
	ref.leaf(t, "leaf1", t0, "interfaces/interface[name=Management0]/state/oper-status", str("DOWN"))
	ref.leaf(t, "leaf1", t0, "lldp/interfaces/interface[name=Ethernet0]/neighbors/neighbor[id=1]/state/system-name", str("host1"))

	topo := &planes.Topology{
		Planes:   []planes.Plane{{Name: "p0"}},
		Switches: []planes.Switch{{Name: "leaf1", Plane: "p0", GNMI: planes.GNMITarget{Address: ref.addr, Insecure: true}}},
		Endpoints: []planes.Endpoint{
			{Name: "h1", Ports: []planes.Port{{Plane: "p0", Switch: "leaf1", Interface: "Ethernet0"}}},
			{Name: "h2", Ports: []planes.Port{{Plane: "p0", Switch: "leaf1", Interface: "Ethernet4"}}},
		},
	}
	h := startCollector(t, fastConfig(), topo, nil)
	h.waitReach(t, 0, "synced", synced)
	testutil.WaitFor(t, 5*time.Second, "oper-status of both interfaces", func() bool {
		n := 0
		for _, s := range h.rec.samplesSince(0) {
			if s.Oper == planes.OperUp {
				n++
			}
		}
		return n == 2
	})

	// One second later (target time), 2000 more octets on Ethernet0.
	ns, _ := h.rec.mark()
	counters(t0.Add(time.Second), "Ethernet0", 3000)
	testutil.WaitFor(t, 5*time.Second, "a rate for Ethernet0", func() bool {
		for _, s := range h.rec.samplesSince(ns) {
			if s.Interface == "Ethernet0" && s.Rates != nil && s.Rates.InOctets == 2000 && s.Rates.ECNMarked == 200 {
				return true
			}
		}
		return false
	})
	ref.leaf(t, "leaf1", t0.Add(2*time.Second), "interfaces/interface[name=Ethernet4]/state/oper-status", str("DOWN"))
	testutil.WaitFor(t, 5*time.Second, "Ethernet4 DOWN", func() bool {
		for _, s := range h.rec.samplesSince(ns) {
			if s.Interface == "Ethernet4" && s.Oper == planes.OperDown {
				return true
			}
		}
		return false
	})
	for _, s := range h.rec.samplesSince(0) {
		if s.Interface == "Management0" {
			t.Fatalf("sample for an interface not in the topology: %+v", s)
		}
		if s.Rates != nil && (s.Rates.InOctets < 0 || s.Rates.InOctets > 2000) {
			t.Fatalf("rate %+v", *s.Rates)
		}
	}
}

// The reference server insists on a target in the prefix; with NoTarget the
// collector says why it cannot subscribe.
func TestReferenceServerWithoutTarget(t *testing.T) {
	ref := startReference(t, "leaf1")
	topo := &planes.Topology{
		Planes:   []planes.Plane{{Name: "p0"}},
		Switches: []planes.Switch{{Name: "leaf1", Plane: "p0", GNMI: planes.GNMITarget{Address: ref.addr, Insecure: true}}},
	}
	cfg := fastConfig()
	cfg.NoTarget = true
	h := startCollector(t, cfg, topo, nil)
	r := h.waitReach(t, 0, "unreachable", unreached)
	if !strings.Contains(r.Reason, "missing target") {
		t.Fatalf("reason %q", r.Reason)
	}
}
