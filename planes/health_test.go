package planes

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// fabric: planes p0, p1; one switch each; 8 endpoints.
func testFabric(t *testing.T) *Topology {
	t.Helper()
	var b strings.Builder
	b.WriteString("planes: [{name: p0}, {name: p1}]\nswitches:\n")
	for p := 0; p < 2; p++ {
		fmt.Fprintf(&b, "  - {name: s%d, plane: p%d, gnmi: {address: 'h:1', insecure: true}}\n", p, p)
	}
	b.WriteString("endpoints:\n")
	for h := 0; h < 8; h++ {
		fmt.Fprintf(&b, "  - name: h%d\n    ports:\n", h)
		for p := 0; p < 2; p++ {
			fmt.Fprintf(&b, "      - {plane: p%d, address: 10.0.%d.%d, switch: s%d, interface: E%d, speed_bps: 100}\n", p, p, h+1, p, h)
		}
	}
	topo, err := ParseTopology([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

type harness struct {
	t     *testing.T
	clock *manualClock
	e     *Engine
	sub   *Subscription
}

func newHarness(t *testing.T, mutate func(*HealthConfig)) *harness {
	cfg := DefaultHealthConfig()
	cfg.FlapDamping = false
	if mutate != nil {
		mutate(&cfg)
	}
	clock := &manualClock{now: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)}
	bus := NewBus()
	h := &harness{t: t, clock: clock, e: NewEngine(cfg, clock, bus, nil), sub: bus.Subscribe(1000)}
	topo := testFabric(t)
	h.e.SetTopology(topo, topo.Links())
	return h
}

func (h *harness) oper(sw, iface string, st OperStatus) {
	h.e.ObserveInterfaces([]InterfaceSample{{Switch: sw, Interface: iface, At: h.clock.Now(), Oper: st}})
}

func (h *harness) rates(sw, iface string, r InterfaceRates) {
	h.e.ObserveInterfaces([]InterfaceSample{{Switch: sw, Interface: iface, At: h.clock.Now(), Rates: &r}})
}

// events drains what was published as "kind subject from->to".
func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.sub.C:
			out = append(out, fmt.Sprintf("%s %s %s->%s", e.SubjectKind, e.Subject, e.From, e.To))
		default:
			return out
		}
	}
}

func (h *harness) expectEvents(want ...string) {
	h.t.Helper()
	got := h.events()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		h.t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func (h *harness) expectLink(name string, want LinkState) {
	h.t.Helper()
	if lh, _ := h.e.LinkHealth(name); lh.State != want {
		h.t.Fatalf("link %s = %s (%s), want %s", name, lh.State, lh.Reason, want)
	}
}

func (h *harness) expectPlane(name string, want PlaneState) {
	h.t.Helper()
	if ph, _ := h.e.PlaneHealth(name); ph.State != want {
		h.t.Fatalf("plane %s = %s (%s), want %s", name, ph.State, ph.Reason, want)
	}
}

func TestPortDownAndRestore(t *testing.T) {
	h := newHarness(t, nil)
	h.oper("s0", "E3", OperUp)
	h.expectEvents()
	h.oper("s0", "E3", OperDown)
	h.expectLink("s0:E3", LinkDown)
	h.expectPlane("p0", PlaneDegraded)
	h.expectPlane("p1", PlaneHealthy)
	h.expectEvents("link s0:E3 up->down", "switch s0 healthy->degraded", "plane p0 healthy->degraded")
	if ph, _ := h.e.PlaneHealth("p0"); ph.CapacityBps != 700 || ph.LinksDown != 1 {
		t.Fatalf("p0 = %+v", ph)
	}

	h.oper("s0", "E3", OperUp)
	h.e.Tick()
	h.expectLink("s0:E3", LinkDown) // hold time not over
	h.clock.Advance(DefaultHealthConfig().UpHold - time.Millisecond)
	h.e.Tick()
	h.expectLink("s0:E3", LinkDown)
	h.clock.Advance(time.Millisecond)
	h.e.Tick()
	h.expectLink("s0:E3", LinkUp)
	h.expectPlane("p0", PlaneHealthy)
	h.expectEvents("link s0:E3 down->up", "switch s0 degraded->healthy", "plane p0 degraded->healthy")
}

func TestPlaneDownBelowCapacity(t *testing.T) {
	h := newHarness(t, nil)
	for i := 0; i < 5; i++ {
		h.oper("s1", fmt.Sprintf("E%d", i), OperDown)
	}
	h.expectPlane("p1", PlaneDown) // 3/8 left < 50%
	for i := 5; i < 8; i++ {
		h.oper("s1", fmt.Sprintf("E%d", i), "LOWER_LAYER_DOWN")
	}
	if sh, _ := h.e.SwitchHealth("s1"); sh.State != PlaneDown {
		t.Fatalf("switch with every link down = %s", sh.State)
	}
}

func TestOutOfOrderOperIgnored(t *testing.T) {
	h := newHarness(t, nil)
	now := h.clock.Now()
	h.e.ObserveInterfaces([]InterfaceSample{{Switch: "s0", Interface: "E1", At: now, Oper: OperDown}})
	h.e.ObserveInterfaces([]InterfaceSample{{Switch: "s0", Interface: "E1", At: now.Add(-time.Second), Oper: OperUp}})
	h.clock.Advance(time.Minute)
	h.e.Tick()
	h.expectLink("s0:E1", LinkDown)
}

func TestUnknownSamplesIgnored(t *testing.T) {
	h := newHarness(t, nil)
	h.e.ObserveInterfaces([]InterfaceSample{{Switch: "nope", Interface: "E1", Oper: OperDown}, {Switch: "s0", Interface: "E99", Oper: OperDown}})
	h.e.ObserveSwitch(SwitchReachability{Switch: "nope"})
	h.expectEvents()
}

func TestDegradationHysteresis(t *testing.T) {
	h := newHarness(t, nil)
	bad := InterfaceRates{Interval: time.Second, InPkts: 10000, OutPkts: 10000, InErrors: 50} // 5e-3 > 1e-4
	good := InterfaceRates{Interval: time.Second, InPkts: 10000, OutPkts: 10000}
	h.rates("s0", "E2", bad)
	h.expectLink("s0:E2", LinkUp) // one sample is not enough
	h.rates("s0", "E2", bad)
	h.expectLink("s0:E2", LinkDegraded)
	h.expectPlane("p0", PlaneDegraded)
	h.rates("s0", "E2", good)
	h.clock.Advance(DefaultHealthConfig().ClearHold / 2)
	h.rates("s0", "E2", good)
	h.expectLink("s0:E2", LinkDegraded)
	h.clock.Advance(DefaultHealthConfig().ClearHold / 2)
	h.e.Tick()
	h.expectLink("s0:E2", LinkUp)
	h.expectPlane("p0", PlaneHealthy)

	// An idle link with a stray error is not judged.
	idle := InterfaceRates{Interval: time.Second, InPkts: 10, InErrors: 5}
	h.rates("s0", "E4", idle)
	h.rates("s0", "E4", idle)
	h.expectLink("s0:E4", LinkUp)

	// ECN over the threshold degrades.
	ecn := InterfaceRates{Interval: time.Second, InPkts: 1000, OutPkts: 1000, ECNMarked: 500}
	h.rates("s0", "E5", ecn)
	h.rates("s0", "E5", ecn)
	h.expectLink("s0:E5", LinkDegraded)
}

func TestFlapDamping(t *testing.T) {
	h := newHarness(t, func(c *HealthConfig) { c.FlapDamping = true; c.UpHold = 0 })
	for i := 0; i < 3; i++ {
		h.oper("s0", "E0", OperDown)
		h.clock.Advance(100 * time.Millisecond)
		h.oper("s0", "E0", OperUp)
		h.e.Tick()
		h.clock.Advance(100 * time.Millisecond)
	}
	h.oper("s0", "E0", OperDown) // 4th down: penalty ~4000 > 3000
	h.oper("s0", "E0", OperUp)
	h.e.Tick()
	h.expectLink("s0:E0", LinkDown)
	if lh, _ := h.e.LinkHealth("s0:E0"); !lh.Suppressed {
		t.Fatal("flapping link not suppressed")
	}
	// Penalty ~4000 decays below 1500 after about 2 half-lives.
	h.clock.Advance(15 * time.Second)
	h.e.Tick()
	h.expectLink("s0:E0", LinkDown)
	h.clock.Advance(10 * time.Second)
	h.e.Tick()
	h.expectLink("s0:E0", LinkUp)
}

func TestUnreachableSwitchHoldsBeforeDown(t *testing.T) {
	h := newHarness(t, nil)
	h.e.ObserveSwitch(SwitchReachability{Switch: "s0", Reachable: false, Reason: "stream closed"})
	// A 10 s outage: no link goes down, the plane only shows it.
	for i := 0; i < 10; i++ {
		h.clock.Advance(time.Second)
		h.e.Tick()
	}
	h.expectLink("s0:E0", LinkUp)
	h.expectPlane("p0", PlaneHealthy)
	if sh, _ := h.e.SwitchHealth("s0"); sh.Reachable {
		t.Fatal("switch still reachable")
	}
	h.e.ObserveSwitch(SwitchReachability{Switch: "s0", Reachable: true, Synced: true})
	for _, ev := range h.events() {
		if strings.Contains(ev, "->down") {
			t.Fatalf("short outage produced %s", ev)
		}
	}

	// A long one: after the hold every link is down, and recovery needs fresh UPs.
	h.e.ObserveSwitch(SwitchReachability{Switch: "s0", Reachable: false, Reason: "keepalive timeout"})
	h.clock.Advance(DefaultHealthConfig().UnreachableHold)
	h.e.Tick()
	h.expectLink("s0:E0", LinkDown)
	h.expectPlane("p0", PlaneDown)
	h.e.ObserveSwitch(SwitchReachability{Switch: "s0", Reachable: true, Synced: true})
	h.clock.Advance(time.Minute)
	h.e.Tick()
	h.expectLink("s0:E0", LinkDown)
	for i := 0; i < 8; i++ {
		h.oper("s0", fmt.Sprintf("E%d", i), OperUp)
	}
	h.clock.Advance(DefaultHealthConfig().UpHold)
	h.e.Tick()
	h.expectPlane("p0", PlaneHealthy)
}

// Under a cut stream, the endpoints' evidence judges the links: those
// that carry traffic stay up past the hold, one that fails goes down at
// once; evidence of a reachable switch's links changes nothing.
func TestEndpointEvidenceJudgesLinksOfUnreachableSwitch(t *testing.T) {
	h := newHarness(t, nil)
	for i := 0; i < 8; i++ {
		h.oper("s0", fmt.Sprintf("E%d", i), OperUp)
	}
	up := map[string]LinkEvidence{}
	for i := 0; i < 8; i++ {
		up[fmt.Sprintf("s0:E%d", i)] = LinkEvidence{State: LinkUp, Reason: "reaches peers"}
	}
	h.e.ObserveEvidence(map[string]LinkEvidence{"s0:E1": {State: LinkDown, Reason: "reaches none"}})
	h.expectLink("s0:E1", LinkUp) // the switch's own word counts while it is reachable
	if lh, _ := h.e.LinkHealth("s0:E1"); lh.Evidence == nil || lh.Evidence.State != LinkDown {
		t.Fatalf("link s0:E1 shows evidence %+v", lh.Evidence)
	}
	h.e.ObserveEvidence(up)
	h.events()

	h.e.ObserveSwitch(SwitchReachability{Switch: "s0", Reachable: false, Reason: "stream closed"})
	h.clock.Advance(2 * DefaultHealthConfig().UnreachableHold)
	h.e.Tick()
	h.expectLink("s0:E0", LinkUp)
	h.expectPlane("p0", PlaneHealthy)
	if sh, _ := h.e.SwitchHealth("s0"); sh.Reachable || sh.State != PlaneDegraded {
		t.Fatalf("switch s0 = %+v, want unreachable and degraded", sh)
	}
	h.expectEvents("switch s0 healthy->degraded")

	// A change names only the links it changes; the others keep theirs.
	h.e.ChangeEvidence(map[string]LinkEvidence{"s0:E3": {State: LinkDown, Reason: "reaches none of its peers"}})
	h.expectLink("s0:E3", LinkDown)
	h.expectLink("s0:E2", LinkUp)
	if lh, _ := h.e.LinkHealth("s0:E2"); lh.Evidence == nil || lh.Evidence.State != LinkUp {
		t.Fatalf("link s0:E2 lost its evidence to another link's change: %+v", lh.Evidence)
	}
	if lh, _ := h.e.LinkHealth("s0:E3"); !strings.Contains(lh.Reason, "endpoint evidence: reaches none of its peers") {
		t.Fatalf("link s0:E3 reason %q", lh.Reason)
	}
	h.expectEvents("link s0:E3 up->down", "plane p0 healthy->degraded")

	// Evidence gone: the link keeps its state; the hold then takes the
	// others down, since nothing vouches for them.
	h.e.ObserveEvidence(nil)
	h.e.Tick()
	h.expectLink("s0:E3", LinkDown)
	h.expectLink("s0:E2", LinkDown)
	h.expectPlane("p0", PlaneDown)

	// Back: the telemetry judges again; every port needs a fresh UP.
	h.e.ObserveSwitch(SwitchReachability{Switch: "s0", Reachable: true, Synced: true})
	h.oper("s0", "E2", OperUp)
	h.clock.Advance(DefaultHealthConfig().UpHold)
	h.e.Tick()
	h.expectLink("s0:E3", LinkDown)
	h.expectLink("s0:E2", LinkUp)
}

// Evidence brings a link up only if seen since the link went down, after
// the up hold, and not while flap damping holds the link down; evidence
// older than the switch's own DOWN does not override it.
func TestEndpointEvidenceRecovery(t *testing.T) {
	h := newHarness(t, func(c *HealthConfig) { c.FlapDamping = true })
	up := map[string]LinkEvidence{"s0:E1": {State: LinkUp, Reason: "reaches peers"}}
	down := map[string]LinkEvidence{"s0:E1": {State: LinkDown, Reason: "reaches none"}}
	h.oper("s0", "E1", OperUp)
	h.e.ObserveEvidence(up)
	h.oper("s0", "E1", OperDown) // the switch's own word, then its stream drops
	h.expectLink("s0:E1", LinkDown)
	h.e.ObserveSwitch(SwitchReachability{Switch: "s0", Reachable: false, Reason: "stream closed"})
	h.clock.Advance(time.Second)
	h.e.Tick()
	h.expectLink("s0:E1", LinkDown) // the up evidence predates the DOWN

	// Fresh evidence after a down: up only after the up hold.
	h.e.ObserveEvidence(down)
	h.clock.Advance(time.Second)
	h.e.ObserveEvidence(up)
	h.e.Tick()
	h.expectLink("s0:E1", LinkDown)
	h.clock.Advance(DefaultHealthConfig().UpHold)
	h.e.Tick()
	h.expectLink("s0:E1", LinkUp)

	// Evidence that flaps: the damping penalty suppresses the link.
	for range 4 {
		h.e.ObserveEvidence(down)
		h.clock.Advance(100 * time.Millisecond)
		h.e.ObserveEvidence(up)
		h.clock.Advance(DefaultHealthConfig().UpHold)
		h.e.Tick()
	}
	h.expectLink("s0:E1", LinkDown)
	if lh, _ := h.e.LinkHealth("s0:E1"); !lh.Suppressed {
		t.Fatalf("flapping evidence: link %+v, want suppressed", lh)
	}
}

func TestDrainAndRestore(t *testing.T) {
	h := newHarness(t, nil)
	h.e.SetDrained(map[string]bool{"p1": true})
	h.expectPlane("p1", PlaneDraining)
	h.e.SetDrained(nil)
	h.expectPlane("p1", PlaneHealthy)
	h.events()

	// A restarted engine takes the states remembered in the history.
	h2 := newHarness(t, nil)
	h2.e.Restore([]Event{
		{SubjectKind: SubjectLink, Subject: "s0:E1", To: "down"},
		{SubjectKind: SubjectPlane, Subject: "p0", To: "degraded"},
		{SubjectKind: SubjectLink, Subject: "ghost:E1", To: "down"},
	})
	h2.expectLink("s0:E1", LinkDown)
	h2.expectPlane("p0", PlaneDegraded)
	h2.oper("s0", "E1", OperUp)
	h2.clock.Advance(DefaultHealthConfig().UpHold)
	h2.e.Tick()
	h2.expectPlane("p0", PlaneHealthy)
}

func TestTopologyChangeKeepsState(t *testing.T) {
	h := newHarness(t, nil)
	h.oper("s0", "E1", OperDown)
	topo := testFabric(t)
	topo.Endpoints = topo.Endpoints[:4]
	h.e.SetTopology(topo, topo.Links())
	h.expectLink("s0:E1", LinkDown)
	if _, ok := h.e.LinkHealth("s0:E6"); ok {
		t.Fatal("removed link still known")
	}
}

func BenchmarkObserveInterfaces(b *testing.B) {
	cfg := DefaultHealthConfig()
	var sb strings.Builder
	sb.WriteString("planes: [{name: p0}]\nswitches:\n")
	for s := 0; s < 64; s++ {
		fmt.Fprintf(&sb, "  - {name: s%d, plane: p0, gnmi: {address: 'h:1', insecure: true}}\n", s)
	}
	sb.WriteString("endpoints:\n")
	for h := 0; h < 64*64; h++ {
		fmt.Fprintf(&sb, "  - {name: h%d, ports: [{plane: p0, address: 10.%d.%d.1, switch: s%d, interface: E%d}]}\n", h, h/256, h%256, h/64, h%64)
	}
	topo, err := ParseTopology([]byte(sb.String()))
	if err != nil {
		b.Fatal(err)
	}
	e := NewEngine(cfg, nil, nil, nil)
	e.SetTopology(topo, topo.Links())
	r := &InterfaceRates{Interval: time.Second, InPkts: 1000, OutPkts: 1000}
	batches := make([][]InterfaceSample, 64) // one notification per switch
	for s := range batches {
		for p := 0; p < 64; p++ {
			batches[s] = append(batches[s], InterfaceSample{Switch: fmt.Sprintf("s%d", s), Interface: fmt.Sprintf("E%d", p), At: time.Now(), Rates: r})
		}
	}
	b.ReportAllocs()
	n := 0
	for i := 0; b.Loop(); i++ {
		e.ObserveInterfaces(batches[i%64])
		n += 64
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "samples/s")
}

// A snapshot is every state at one instant: it agrees with the engine when
// taken and does not follow later transitions.
func TestSnapshotIsOneInstant(t *testing.T) {
	h := newHarness(t, nil)
	h.oper("s0", "E3", OperUp)
	h.oper("s0", "E5", OperDown)
	h.expectLink("s0:E5", LinkDown)
	before := h.e.Snapshot()
	topo := testFabric(t)
	for _, l := range topo.Links() {
		got, _ := h.e.LinkHealth(l.Name)
		snap, ok := before.LinkHealth(l.Name)
		if !ok {
			t.Fatalf("link %s is not in the snapshot", l.Name)
		}
		// Links not up are held whole; links up by their state.
		if got.State != LinkUp && !reflect.DeepEqual(snap, got) || got.State == LinkUp && snap.State != LinkUp {
			t.Fatalf("link %s: snapshot %+v, engine %+v", l.Name, snap, got)
		}
	}
	for _, p := range topo.Planes {
		if got, _ := h.e.PlaneHealth(p.Name); !reflect.DeepEqual(before.Planes[p.Name], got) {
			t.Fatalf("plane %s: snapshot %+v, engine %+v", p.Name, before.Planes[p.Name], got)
		}
	}
	if len(topo.Links()) != 16 || len(before.Links) != 1 || len(before.Planes) != 2 || len(before.Switches) != 2 {
		t.Fatalf("snapshot of %d links not up, %d planes, %d switches: want 1, 2, 2", len(before.Links), len(before.Planes), len(before.Switches))
	}

	h.oper("s0", "E3", OperDown)
	h.expectLink("s0:E3", LinkDown)
	if lh, _ := before.LinkHealth("s0:E3"); lh.State != LinkUp {
		t.Fatalf("the earlier snapshot followed the transition: %+v", lh)
	}
	if ph, _ := before.PlaneHealth("p0"); ph.State != PlaneDegraded || ph.LinksDown != 1 {
		t.Fatalf("the earlier snapshot's plane followed the transition: %+v", ph)
	}
	after := h.e.Snapshot()
	if lh, _ := after.LinkHealth("s0:E3"); lh.State != LinkDown {
		t.Fatalf("a new snapshot: %+v, want down", lh)
	}
	if ph, _ := after.PlaneHealth("p0"); ph.State != PlaneDegraded || ph.LinksDown != 2 {
		t.Fatalf("a new snapshot's plane: %+v, want degraded with 2 links down", ph)
	}
	if _, ok := after.LinkHealth("s9:E0"); ok {
		t.Fatal("an unknown link is in the snapshot")
	}
}

// PlaneDowns counts each plane's transitions to down, not degradations,
// links failing on a plane already down, or recoveries.
func TestPlaneDownsCountsFailures(t *testing.T) {
	h := newHarness(t, nil)
	down := func(sw string, from, to int, st OperStatus) {
		for i := from; i < to; i++ {
			h.oper(sw, fmt.Sprintf("E%d", i), st)
		}
	}
	down("s1", 0, 1, OperDown)
	if n := h.e.PlaneDowns(); n != 0 {
		t.Fatalf("a degraded plane counted: %d", n)
	}
	down("s1", 1, 8, OperDown)
	h.expectPlane("p1", PlaneDown)
	if n := h.e.PlaneDowns(); n != 1 {
		t.Fatalf("after p1 went down: %d, want 1", n)
	}
	down("s1", 0, 8, OperUp)
	h.clock.Advance(DefaultHealthConfig().UpHold)
	h.e.Tick()
	h.expectPlane("p1", PlaneHealthy)
	down("s0", 0, 5, OperDown)
	down("s1", 0, 5, OperDown)
	if n := h.e.PlaneDowns(); n != 3 {
		t.Fatalf("after p1 came back and p0 and p1 went down: %d, want 3", n)
	}
}
