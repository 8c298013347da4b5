package gnmisim

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	pb "github.com/openconfig/gnmi/proto/gnmi"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/multiplane/multiplane/fabricsim/userspace"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/planes"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/golang/glog.(*fileSink).flushDaemon"))
}

// subscribe opens a STREAM subscription to path (with wildcard keys) and
// returns the leaves it receives, by full path, until sync plus n more
// notifications.
type leaf struct {
	path string
	val  *pb.TypedValue
	ts   int64
}

func dial(t *testing.T, addr string) pb.GNMIClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewGNMIClient(conn)
}

func pathString(prefix, p *pb.Path) string {
	var b strings.Builder
	for _, e := range append(append([]*pb.PathElem(nil), prefix.GetElem()...), p.GetElem()...) {
		b.WriteString("/" + e.GetName())
		for k, v := range e.GetKey() {
			b.WriteString("[" + k + "=" + v + "]")
		}
	}
	return b.String()
}

func collect(t *testing.T, c pb.GNMIClient, target string, paths []*pb.Path, until func([]leaf, bool) bool) []leaf {
	t.Helper()
	ctx, cancel := context.WithTimeout(testenv.Context(t), 10*time.Second)
	defer cancel()
	st, err := c.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var subs []*pb.Subscription
	for _, p := range paths {
		subs = append(subs, &pb.Subscription{Path: p})
	}
	req := &pb.SubscriptionList{Mode: pb.SubscriptionList_STREAM, Subscription: subs}
	if target != "" {
		req.Prefix = &pb.Path{Target: target}
	}
	if err := st.Send(&pb.SubscribeRequest{Request: &pb.SubscribeRequest_Subscribe{Subscribe: req}}); err != nil {
		t.Fatal(err)
	}
	var got []leaf
	synced := false
	for !until(got, synced) {
		r, err := st.Recv()
		if err == io.EOF || err != nil {
			t.Fatalf("recv: %v (got %d leaves)", err, len(got))
		}
		if r.GetSyncResponse() {
			synced = true
		}
		n := r.GetUpdate()
		for _, u := range n.GetUpdate() {
			got = append(got, leaf{path: pathString(n.GetPrefix(), u.GetPath()), val: u.GetVal(), ts: n.GetTimestamp()})
		}
	}
	return got
}

func wild(elems ...string) *pb.Path {
	p := &pb.Path{}
	for _, e := range elems {
		name, key, ok := strings.Cut(e, "[")
		pe := &pb.PathElem{Name: name}
		if ok {
			pe.Key = map[string]string{strings.TrimSuffix(key, "]"): "*"}
		}
		p.Elem = append(p.Elem, pe)
	}
	return p
}

func TestSwitchPublishesOpenConfigPaths(t *testing.T) {
	src := NewStaticSource([]string{"eth1", "eth2"}, "q0", "q1")
	sw, err := Start(Config{Name: "sw1", Source: src, Tick: 20 * time.Millisecond, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	src.Traffic(10, 100)
	if err := sw.Publish(); err != nil {
		t.Fatal(err)
	}
	c := dial(t, sw.Addr())
	for _, target := range []string{"sw1", ""} { // with and without a target in the prefix
		got := collect(t, c, target, []*pb.Path{wild("interfaces", "interface[name]"), wild("qos", "interfaces", "interface[interface-id]")},
			func(_ []leaf, synced bool) bool { return synced })
		have := map[string]*pb.TypedValue{}
		for _, l := range got {
			have[l.path] = l.val
		}
		for _, want := range []string{
			"/interfaces/interface[name=eth1]/state/oper-status",
			"/interfaces/interface[name=eth2]/state/admin-status",
			"/interfaces/interface[name=eth1]/state/counters/in-octets",
			"/interfaces/interface[name=eth2]/state/counters/interface-transitions",
			"/interfaces/interface[name=eth2]/state/counters/in-fcs-errors",
			"/qos/interfaces/interface[interface-id=eth1]/output/queues/queue[name=q0]/state/ecn-marked-pkts",
			"/qos/interfaces/interface[interface-id=eth2]/output/queues/queue[name=q1]/state/dropped-pkts",
		} {
			if have[want] == nil {
				t.Errorf("target %q: %s missing; have %d leaves", target, want, len(have))
			}
		}
		if v := have["/interfaces/interface[name=eth1]/state/counters/in-octets"].GetUintVal(); v != 1000 {
			t.Errorf("in-octets %d, want 1000", v)
		}
		if v := have["/interfaces/interface[name=eth1]/state/oper-status"].GetStringVal(); v != "UP" {
			t.Errorf("oper-status %q", v)
		}
	}
}

func TestSwitchProgrammable(t *testing.T) {
	src := NewStaticSource([]string{"eth1"})
	sw, err := Start(Config{Name: "sw1", Source: src, Tick: time.Hour, Logger: testenv.Logger(t)}) // publish by hand
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	c := dial(t, sw.Addr())
	counter := func(leafName string) uint64 {
		t.Helper()
		got := collect(t, c, "sw1", []*pb.Path{wild("interfaces", "interface[name]", "state")}, func(_ []leaf, s bool) bool { return s })
		for _, l := range got {
			if strings.HasSuffix(l.path, "/"+leafName) {
				return l.val.GetUintVal()
			}
		}
		t.Fatalf("%s not published", leafName)
		return 0
	}
	src.Traffic(5, 100) // 500 octets
	sw.Publish()
	if got := counter("in-octets"); got != 500 {
		t.Fatalf("in-octets %d", got)
	}
	if err := sw.SetCounter("eth1", InOctets, 1<<64-100); err != nil {
		t.Fatal(err)
	}
	src.Traffic(2, 100) // +200: wraps to 100
	sw.Publish()
	if got := counter("in-octets"); got != 100 {
		t.Fatalf("in-octets after wrap %d, want 100", got)
	}
	sw.ResetCounters()
	sw.Publish()
	if got := counter("in-octets"); got != 0 {
		t.Fatalf("in-octets after reset %d", got)
	}
	if err := sw.AddCounter("eth1", InErrors, 42); err != nil {
		t.Fatal(err)
	}
	sw.Publish()
	if got := counter("in-errors"); got != 42 {
		t.Fatalf("in-errors %d", got)
	}
	// Oper-status: pushed at once; transitions counted.
	if err := sw.SetOperStatus("eth1", "DOWN"); err != nil {
		t.Fatal(err)
	}
	sw.Publish()
	if got := counter("interface-transitions"); got != 1 {
		t.Fatalf("interface-transitions %d", got)
	}
	if err := sw.SetOperStatus("eth9", "DOWN"); err == nil {
		t.Fatal("unknown port accepted")
	}
	// Garbage: wrong types on the wire.
	if err := sw.PublishGarbage("eth1"); err != nil {
		t.Fatal(err)
	}
	got := collect(t, c, "sw1", []*pb.Path{wild("interfaces", "interface[name]", "state")}, func(_ []leaf, s bool) bool { return s })
	for _, l := range got {
		if strings.HasSuffix(l.path, "/in-octets") && l.val.GetStringVal() != "garbage" {
			t.Fatalf("garbage not published: %v", l.val)
		}
		if strings.HasSuffix(l.path, "/oper-status") && l.val.GetIntVal() != 7 {
			t.Fatalf("garbage oper-status not published: %v", l.val)
		}
	}
}

func TestSwitchRestartStopStall(t *testing.T) {
	src := NewStaticSource([]string{"eth1"})
	sw, err := Start(Config{Name: "sw1", Source: src, Tick: 10 * time.Millisecond, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	addr := sw.Addr()
	c := dial(t, addr)
	ctx, cancel := context.WithCancel(testenv.Context(t))
	defer cancel()
	st, err := c.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.Send(&pb.SubscribeRequest{Request: &pb.SubscribeRequest_Subscribe{Subscribe: &pb.SubscriptionList{
		Subscription: []*pb.Subscription{{Path: wild("interfaces", "interface[name]", "state", "counters")}}}}})
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "one stream", func() bool { return sw.Streams() == 1 })

	// Stall: nothing arrives, but the stream stays open.
	sw.Stall()
	got := make(chan error, 1)
	go func() {
		for {
			if _, err := st.Recv(); err != nil {
				got <- err
				return
			}
			select {
			case got <- nil:
			default:
			}
		}
	}()
	// Drain what was in flight, then expect silence while the stream stays up.
	ticks := sw.Ticks()
	testutil.WaitFor(t, 5*time.Second, "ticks while stalled", func() bool { return sw.Ticks() >= ticks+10 })
	for len(got) > 0 {
		<-got
	}
	ticks = sw.Ticks()
	testutil.WaitFor(t, 5*time.Second, "more ticks while stalled", func() bool { return sw.Ticks() >= ticks+5 })
	if len(got) > 0 {
		t.Fatal("stalled stream still sends")
	}
	if sw.Streams() != 1 {
		t.Fatalf("streams %d while stalled", sw.Streams())
	}
	sw.Unstall()
	testutil.WaitFor(t, 5*time.Second, "updates after unstall", func() bool { return len(got) > 0 })

	// Restart: the stream ends, the address stays, counters restart.
	src.Traffic(1, 1000)
	sw.Publish()
	if err := sw.Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "stream ended by restart", func() bool {
		select {
		case err := <-got:
			return err != nil
		default:
			return false
		}
	})
	if sw.Addr() != addr {
		t.Fatalf("address changed: %s → %s", addr, sw.Addr())
	}
	c2 := dial(t, addr)
	leaves := collect(t, c2, "sw1", []*pb.Path{wild("interfaces", "interface[name]", "state", "counters")}, func(_ []leaf, s bool) bool { return s })
	for _, l := range leaves {
		if strings.HasSuffix(l.path, "/in-octets") && l.val.GetUintVal() != 0 {
			t.Fatalf("in-octets %d after restart", l.val.GetUintVal())
		}
	}

	// Stop refuses connections until Resume.
	sw.Stop()
	cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
	defer ccancel()
	if st, err := dial(t, addr).Subscribe(cctx); err == nil {
		if _, err := st.Recv(); err == nil {
			t.Fatal("stopped switch answered")
		}
	}
	if err := sw.Resume(); err != nil {
		t.Fatal(err)
	}
	collect(t, dial(t, addr), "sw1", []*pb.Path{wild("interfaces")}, func(_ []leaf, s bool) bool { return s })
}

func TestUserspacePlaneSource(t *testing.T) {
	ctx := testenv.Context(t)
	f, err := userspace.Start(ctx, userspace.Config{Hosts: 2, Port: testutil.FabricPort(t, 2, 2), Planes: []userspace.PlaneConfig{{}, {}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	src := UserspacePlane(f, 1)
	ports, err := src.Ports(nil)
	if err != nil || len(ports) != 2 || ports[0].Name != "eth1" || ports[0].OperStatus != "UP" {
		t.Fatalf("ports %+v, %v", ports, err)
	}
	f.SetLinkUp(1, 1, false)
	ports, _ = src.Ports(nil)
	if ports[1].OperStatus != "DOWN" {
		t.Fatalf("eth2 after link down: %+v", ports[1])
	}
	sw, err := Start(Config{Name: "p1-sw", Source: src, Tick: time.Hour, OperPoll: 10 * time.Millisecond, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	got := collect(t, dial(t, sw.Addr()), "", []*pb.Path{wild("interfaces", "interface[name]", "state", "oper-status")}, func(_ []leaf, s bool) bool { return s })
	downs := 0
	for _, l := range got {
		if l.val.GetStringVal() == "DOWN" {
			downs++
		}
	}
	if downs != 1 {
		t.Fatalf("leaves %+v", got)
	}
	// A link failing in the fabric is pushed within OperPoll, not at the
	// next (hourly) tick.
	f.SetLinkUp(0, 1, false)
	collect(t, dial(t, sw.Addr()), "", []*pb.Path{wild("interfaces", "interface[name]", "state", "oper-status")}, func(got []leaf, _ bool) bool {
		for _, l := range got {
			if strings.Contains(l.path, "name=eth1") && l.val.GetStringVal() == "DOWN" {
				return true
			}
		}
		return false
	})
}

func TestNetnsBridgeParse(t *testing.T) {
	out := []byte("/sys/class/net/h0/operstate:up\n/sys/class/net/h0/statistics/rx_bytes:1234\n" +
		"/sys/class/net/h1/operstate:lowerlayerdown\n/sys/class/net/h1/carrier_changes:3\n")
	v := parseSysfs(out)
	if v["h0"]["operstate"] != "up" || v["h0"]["rx_bytes"] != "1234" || v["h1"]["carrier_changes"] != "3" {
		t.Fatalf("%v", v)
	}
	if operFromSysfs("lowerlayerdown") != "LOWER_LAYER_DOWN" || operFromSysfs("weird") != "UNKNOWN" {
		t.Fatal("operstate mapping")
	}
}

func TestFleetTopologyIsValid(t *testing.T) {
	f, err := StartFleet(FleetConfig{Switches: 4, Ports: 3, Planes: 2, Tick: time.Second, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	data, err := json.Marshal(f.Topology())
	if err != nil {
		t.Fatal(err)
	}
	topo, err := planes.ParseTopology(data)
	if err != nil {
		t.Fatalf("fleet topology rejected: %v\n%s", err, data)
	}
	if len(topo.Switches) != 4 || len(topo.Endpoints) != 6 || len(topo.Links()) != 12 {
		t.Fatalf("%d switches, %d endpoints, %d links", len(topo.Switches), len(topo.Endpoints), len(topo.Links()))
	}
}

// A staggered fleet's switches publish one after the other over a Tick,
// not in step.
func TestFleetStaggerSpreadsTicks(t *testing.T) {
	const tick = 2 * time.Second
	f, err := StartFleet(FleetConfig{Switches: 2, Ports: 2, Tick: tick, Stagger: true, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	sw0, sw1 := f.Switches[0], f.Switches[1]
	start0, start1 := sw0.Ticks(), sw1.Ticks()
	testutil.WaitFor(t, 2*tick, "switch 0's first tick", func() bool { return sw0.Ticks() > start0 })
	first := time.Now()
	if n := sw1.Ticks() - start1; n != 0 {
		t.Fatalf("switch 1 ticked %d times with switch 0, want half a Tick later", n)
	}
	testutil.WaitFor(t, 2*tick, "switch 1's first tick", func() bool { return sw1.Ticks() > start1 })
	if gap := time.Since(first); gap < tick/4 {
		t.Fatalf("switch 1 ticked %v after switch 0, want about half a Tick (%v)", gap, tick/2)
	}
}
