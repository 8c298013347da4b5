package policy

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/multiplane/multiplane/planes"
)

func fabric(t testing.TB, nPlanes, nHosts int) *planes.Topology {
	t.Helper()
	var b strings.Builder
	b.WriteString("planes:\n")
	for p := 0; p < nPlanes; p++ {
		fmt.Fprintf(&b, "  - {name: p%d}\n", p)
	}
	b.WriteString("switches:\n")
	for p := 0; p < nPlanes; p++ {
		fmt.Fprintf(&b, "  - {name: s%d, plane: p%d, gnmi: {address: 'h:1', insecure: true}}\n", p, p)
	}
	b.WriteString("endpoints:\n")
	for h := 0; h < nHosts; h++ {
		fmt.Fprintf(&b, "  - name: h%03d\n    ports:\n", h)
		for p := 0; p < nPlanes; p++ {
			fmt.Fprintf(&b, "      - {plane: p%d, address: 10.%d.%d.%d, switch: s%d, interface: E%d, speed_bps: 1000}\n", p, p, h/250, h%250+1, p, h)
		}
	}
	topo, err := planes.ParseTopology([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// engineWith returns a real health engine with the given ports down.
func engineWith(t testing.TB, topo *planes.Topology, down ...string) *planes.Engine {
	e := planes.NewEngine(planes.DefaultHealthConfig(), nil, nil, nil)
	e.SetTopology(topo, topo.Links())
	for _, l := range down {
		sw, iface, _ := strings.Cut(l, ":")
		e.ObserveInterfaces([]planes.InterfaceSample{{Switch: sw, Interface: iface, At: time.Now(), Oper: planes.OperDown}})
	}
	return e
}

func planesOf(ep EndpointPolicy) string {
	var s []string
	for _, p := range ep.PathSet.Planes {
		s = append(s, fmt.Sprintf("%s=%.3g", p.Plane, p.Weight))
	}
	return strings.Join(s, " ")
}

func find(out Output, name string) EndpointPolicy {
	for _, e := range out.Endpoints {
		if e.Endpoint == name {
			return e
		}
	}
	return EndpointPolicy{}
}

func TestCompute(t *testing.T) {
	topo := fabric(t, 4, 8)
	tests := []struct {
		name    string
		down    []string
		intents Intents
		host    string
		want    string
	}{
		{"all healthy", nil, Intents{}, "h000", "p0=0.25 p1=0.25 p2=0.25 p3=0.25"},
		{"own link down", []string{"s1:E0"}, Intents{}, "h000", "p0=0.333 p2=0.333 p3=0.333"},
		{"other host's link down: plane degraded, weighted less", []string{"s1:E1"}, Intents{}, "h000", "p0=0.258 p1=0.226 p2=0.258 p3=0.258"},
		{"plane drained", nil, Intents{Drains: []Drain{{Kind: DrainPlane, Target: "p2"}}}, "h005", "p0=0.333 p1=0.333 p3=0.333"},
		{"switch drained", nil, Intents{Drains: []Drain{{Kind: DrainSwitch, Target: "s3"}}}, "h005", "p0=0.333 p1=0.333 p2=0.333"},
		{"link drained", nil, Intents{Drains: []Drain{{Kind: DrainLink, Target: "s0:E7"}}}, "h007", "p1=0.333 p2=0.333 p3=0.333"},
		{"everything drained: fall back to live links", nil, Intents{Drains: []Drain{
			{Kind: DrainPlane, Target: "p0"}, {Kind: DrainPlane, Target: "p1"}, {Kind: DrainPlane, Target: "p2"}, {Kind: DrainPlane, Target: "p3"}}},
			"h000", "p0=0.25 p1=0.25 p2=0.25 p3=0.25"},
		{"drained except a dead link", []string{"s3:E0"}, Intents{Drains: []Drain{{Kind: DrainPlane, Target: "p0"}, {Kind: DrainPlane, Target: "p1"}, {Kind: DrainPlane, Target: "p2"}}},
			"h000", "p0=0.333 p1=0.333 p2=0.333"},
		{"every link dead: every port", []string{"s0:E0", "s1:E0", "s2:E0", "s3:E0"}, Intents{}, "h000", "p0=0.25 p1=0.25 p2=0.25 p3=0.25"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := Compute(Input{Topology: topo, Health: engineWith(t, topo, tc.down...), Intents: tc.intents}, DefaultConfig())
			if got := planesOf(find(out, tc.host)); got != tc.want {
				t.Fatalf("%s path set = %s, want %s", tc.host, got, tc.want)
			}
		})
	}
}

func TestRatePolicy(t *testing.T) {
	topo := fabric(t, 2, 4)
	in := Input{Topology: topo, Health: engineWith(t, topo, "s1:E2"), Intents: Intents{
		Classes:     []RateClass{{Name: "gold", EgressBps: 100e9, IngressBps: 200e9}},
		Assignments: map[string]string{"h001": "gold", "h002": "missing-class"},
	}}
	out := Compute(in, DefaultConfig())
	gold := find(out, "h001").Rate
	if gold.Class != "gold" || gold.EgressBps != 100e9 || gold.IngressBps != 200e9 {
		t.Fatalf("h001 rate = %+v", gold)
	}
	if def := find(out, "h002").Rate; def.Class != DefaultClass || def.EgressBps != 0 {
		t.Fatalf("h002 rate = %+v", def)
	}
	// p1 lost a quarter of its links: its cap is 3/4 of the port speed.
	if caps := gold.PlaneCaps; caps["p1"] != 750 || len(caps) != 1 {
		t.Fatalf("plane caps = %v", caps)
	}
}

// TestProperties checks invariants over random fabrics, health and drains.
func TestProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 200; iter++ {
		nPlanes, nHosts := 1+rng.IntN(8), 1+rng.IntN(20)
		topo := fabric(t, nPlanes, nHosts)
		var down []string
		for _, l := range topo.Links() {
			if rng.Float64() < 0.3 {
				down = append(down, l.Name)
			}
		}
		var in Intents
		for p := 0; p < nPlanes; p++ {
			if rng.Float64() < 0.2 {
				in.Drains = append(in.Drains, Drain{Kind: DrainPlane, Target: fmt.Sprintf("p%d", p)})
			}
		}
		health := engineWith(t, topo, down...)
		out := Compute(Input{Topology: topo, Health: health, Intents: in}, DefaultConfig())
		if len(out.Endpoints) != nHosts {
			t.Fatalf("iter %d: %d endpoints out of %d", iter, len(out.Endpoints), nHosts)
		}
		drainedPlanes := map[string]bool{}
		for _, d := range in.Drains {
			drainedPlanes[d.Target] = true
		}
		for _, ep := range out.Endpoints {
			if len(ep.PathSet.Planes) == 0 {
				t.Fatalf("iter %d: %s has an empty path set", iter, ep.Endpoint)
			}
			sum := 0.0
			for _, p := range ep.PathSet.Planes {
				sum += p.Weight
				if p.Weight <= 0 {
					t.Fatalf("iter %d: %s weight %v on %s", iter, ep.Endpoint, p.Weight, p.Plane)
				}
				if ep.PathSet.Fallback == "" && drainedPlanes[p.Plane] {
					t.Fatalf("iter %d: %s uses drained plane %s without fallback", iter, ep.Endpoint, p.Plane)
				}
				lh, _ := health.LinkHealth(planes.LinkName("s"+p.Plane[1:], "E"+fmt.Sprint(mustAtoi(ep.Endpoint[1:]))))
				if lh.State == planes.LinkDown && ep.PathSet.Fallback != "no live link: using every port" {
					t.Fatalf("iter %d: %s uses dead link on %s", iter, ep.Endpoint, p.Plane)
				}
			}
			if math.Abs(sum-1) > 1e-5 {
				t.Fatalf("iter %d: %s weights sum to %v", iter, ep.Endpoint, sum)
			}
		}
		// Order independence: shuffle the inputs, same documents.
		shuffled := *topo
		shuffled.Endpoints = append([]planes.Endpoint(nil), topo.Endpoints...)
		rng.Shuffle(len(shuffled.Endpoints), func(i, j int) {
			shuffled.Endpoints[i], shuffled.Endpoints[j] = shuffled.Endpoints[j], shuffled.Endpoints[i]
		})
		for i := range shuffled.Endpoints {
			ports := append([]planes.Port(nil), shuffled.Endpoints[i].Ports...)
			rng.Shuffle(len(ports), func(a, b int) { ports[a], ports[b] = ports[b], ports[a] })
			shuffled.Endpoints[i].Ports = ports
		}
		in2 := in
		in2.Drains = append([]Drain(nil), in.Drains...)
		rng.Shuffle(len(in2.Drains), func(i, j int) { in2.Drains[i], in2.Drains[j] = in2.Drains[j], in2.Drains[i] })
		out2 := Compute(Input{Topology: &shuffled, Health: health, Intents: in2}, DefaultConfig())
		a, _ := json.Marshal(out)
		b, _ := json.Marshal(out2)
		if string(a) != string(b) {
			t.Fatalf("iter %d: output depends on input order", iter)
		}
	}
}

func mustAtoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

func BenchmarkCompute4000(b *testing.B) {
	topo := fabric(b, 8, 4000)
	health := engineWith(b, topo, "s3:E17")
	in := Input{Topology: topo, Health: health}
	b.ReportAllocs()
	for b.Loop() {
		Compute(in, DefaultConfig())
	}
}

func TestWhatIf(t *testing.T) {
	topo := fabric(t, 2, 3)
	health := engineWith(t, topo, "s0:E1") // h001 already lost p0
	in := Input{Topology: topo, Health: health}

	imp := WhatIf(in, DefaultConfig(), Drain{Kind: DrainPlane, Target: "p1"})
	if len(imp.Stranded) != 1 || imp.Stranded[0] != "h001" {
		t.Fatalf("stranded = %v, want [h001]", imp.Stranded)
	}
	if len(imp.Affected) != 3 {
		t.Fatalf("affected = %+v", imp.Affected)
	}
	h0 := imp.Affected[0]
	if h0.Endpoint != "h000" || h0.CapacityBefore != 1 || h0.CapacityAfter != 0.5 || strings.Join(h0.PlanesAfter, ",") != "p0" {
		t.Fatalf("h000 impact = %+v", h0)
	}

	imp = WhatIf(in, DefaultConfig(), Drain{Kind: DrainLink, Target: "s1:E2"})
	if len(imp.Stranded) != 0 || len(imp.Affected) != 1 || imp.Affected[0].Endpoint != "h002" {
		t.Fatalf("link drain impact = %+v", imp)
	}
}

// liveHealth is an engine that counts its snapshots and fails the test
// when a computation reads its live state instead of one snapshot.
type liveHealth struct {
	t         *testing.T
	e         *planes.Engine
	snapshots int
}

func (h *liveHealth) Snapshot() *planes.HealthSnapshot { h.snapshots++; return h.e.Snapshot() }
func (h *liveHealth) PlaneHealth(n string) (planes.PlaneHealth, bool) {
	h.t.Errorf("plane %s read live", n)
	return h.e.PlaneHealth(n)
}
func (h *liveHealth) SwitchHealth(n string) (planes.SwitchHealth, bool) {
	h.t.Errorf("switch %s read live", n)
	return h.e.SwitchHealth(n)
}
func (h *liveHealth) LinkHealth(n string) (planes.LinkHealth, bool) {
	h.t.Errorf("link %s read live", n)
	return h.e.LinkHealth(n)
}

// Compute and WhatIf read a live engine through one snapshot each, so a
// transition during the computation cannot split it into before and after.
func TestComputeReadsOneSnapshot(t *testing.T) {
	topo := fabric(t, 4, 8)
	h := &liveHealth{t: t, e: engineWith(t, topo, "s1:E3")}
	out := Compute(Input{Topology: topo, Health: h}, DefaultConfig())
	if h.snapshots != 1 {
		t.Fatalf("Compute took %d snapshots, want 1", h.snapshots)
	}
	if got := planesOf(find(out, "h003")); strings.Contains(got, "p1") {
		t.Fatalf("h003 = %s: the snapshot lost its port down on p1", got)
	}
	h.snapshots = 0
	WhatIf(Input{Topology: topo, Health: h}, DefaultConfig(), Drain{Kind: DrainPlane, Target: "p2"})
	if h.snapshots != 1 {
		t.Fatalf("WhatIf took %d snapshots, want 1 for before and after", h.snapshots)
	}
}

// A plane failing at its switch (every link of the plane down) changes the
// planes' states and no endpoint's own document: O(1) writes per event.
func TestPlaneFailureChangesNoEndpointSpec(t *testing.T) {
	topo := fabric(t, 4, 8)
	var links []string
	for h := 0; h < 8; h++ {
		links = append(links, fmt.Sprintf("s1:E%d", h))
	}
	before := Compute(Input{Topology: topo, Health: engineWith(t, topo)}, DefaultConfig())
	after := Compute(Input{Topology: topo, Health: engineWith(t, topo, links...)}, DefaultConfig())
	if after.Planes[1].State != string(planes.PlaneDown) {
		t.Fatalf("p1 is %s with every link down", after.Planes[1].State)
	}
	for i, ep := range after.Endpoints {
		b, _ := json.Marshal(before.Endpoints[i].Spec)
		a, _ := json.Marshal(ep.Spec)
		if string(a) != string(b) {
			t.Fatalf("%s's document changed with the plane:\n%s\n%s", ep.Endpoint, b, a)
		}
		if got := planesOf(ep); got != "p0=0.333 p2=0.333 p3=0.333" {
			t.Fatalf("%s resolves to %s with p1 down", ep.Endpoint, got)
		}
	}
	if len(after.Unusable) != 0 {
		t.Fatalf("ports listed unusable for the plane's reason: %v", after.Unusable)
	}
	// Judged down with 3 of its 8 links still up, the plane reads as it
	// does with none: the links failing after it change no key.
	partial := Compute(Input{Topology: topo, Health: engineWith(t, topo, links[:5]...)}, DefaultConfig())
	if !reflect.DeepEqual(partial.Planes, after.Planes) || !reflect.DeepEqual(partial.Unusable, after.Unusable) {
		t.Fatalf("planes with 5 of 8 links down %+v, with all %+v", partial.Planes, after.Planes)
	}
	// One link down while its plane is up is the endpoint's own state.
	one := Compute(Input{Topology: topo, Health: engineWith(t, topo, "s1:E0")}, DefaultConfig())
	if p := find(one, "h000").Spec.Ports[1]; p.Link != "down" || len(one.Unusable) != 1 {
		t.Fatalf("h000's port on p1 %+v, unusable %v", p, one.Unusable)
	}
}

// Planes alone (what the publisher writes at once when a plane goes
// down) is what Compute gives for the planes.
func TestPlanesIsComputesPlanes(t *testing.T) {
	topo := fabric(t, 4, 8)
	var links []string
	for h := 0; h < 8; h++ {
		links = append(links, fmt.Sprintf("s1:E%d", h))
	}
	drains := []Drain{{ID: 1, Kind: DrainPlane, Target: "p3"}, {ID: 2, Kind: DrainSwitch, Target: "s2"}}
	for _, e := range []*planes.Engine{engineWith(t, topo), engineWith(t, topo, links...), engineWith(t, topo, "s0:E1", "s0:E2")} {
		in := Input{Topology: topo, Health: e, Intents: Intents{Drains: drains}}
		want := Compute(in, DefaultConfig()).Planes
		if got := Planes(topo, e, drains); !reflect.DeepEqual(got, want) {
			t.Fatalf("Planes = %+v, Compute's planes %+v", got, want)
		}
	}
	if got := Planes(topo, engineWith(t, topo, links...), drains); got[1].State != string(planes.PlaneDown) || got[3].State != string(planes.PlaneDraining) {
		t.Fatalf("p1 with every link down, p3 drained: %+v", got)
	}
}
