package contract

import (
	"errors"
	"reflect"
	"testing"
)

func testSpec() EndpointSpec {
	return EndpointSpec{Schema: SchemaVersion, Generation: 3, Endpoint: "a", Entropy: 4, DegradedLinkFactor: 0.5, Class: "default",
		Ports: []SpecPort{
			{Plane: "p0", Index: 0, Address: "10.0.0.1", SpeedBps: 400e9},
			{Plane: "p1", Index: 1, Address: "10.0.1.1", SpeedBps: 400e9},
			{Plane: "p2", Index: 2, Address: "10.0.2.1", SpeedBps: 400e9},
			{Plane: "p3", Index: 3, Address: "10.0.3.1", SpeedBps: 400e9},
		}}
}

func testPlanes() []PlaneStatus {
	return []PlaneStatus{{Name: "p0", Index: 0, State: "healthy", CapacityRatio: 1}, {Name: "p1", Index: 1, State: "healthy", CapacityRatio: 1},
		{Name: "p2", Index: 2, State: "healthy", CapacityRatio: 1}, {Name: "p3", Index: 3, State: "healthy", CapacityRatio: 1}}
}

func weights(ps PathSet) map[string]float64 {
	w := map[string]float64{}
	for _, p := range ps.Planes {
		w[p.Plane] = p.Weight
	}
	return w
}

func TestResolve(t *testing.T) {
	for name, tc := range map[string]struct {
		spec     func(*EndpointSpec)
		planes   func([]PlaneStatus)
		want     map[string]float64
		fallback bool
		caps     map[string]int64
	}{
		"all up": {want: map[string]float64{"p0": 0.25, "p1": 0.25, "p2": 0.25, "p3": 0.25}},
		"plane down": {planes: func(p []PlaneStatus) { p[1].State = "down"; p[1].CapacityRatio = 0 },
			want: map[string]float64{"p0": 0.333333, "p2": 0.333333, "p3": 0.333333}, caps: map[string]int64{"p1": 0}},
		"plane drained": {planes: func(p []PlaneStatus) { p[2].State, p[2].Drained = "draining", true },
			want: map[string]float64{"p0": 0.333333, "p1": 0.333333, "p3": 0.333333}},
		"plane degraded": {planes: func(p []PlaneStatus) { p[0].State, p[0].CapacityRatio = "degraded", 0.5 },
			want: map[string]float64{"p0": 0.142857, "p1": 0.285714, "p2": 0.285714, "p3": 0.285714}, caps: map[string]int64{"p0": 200e9}},
		"link down and degraded": {spec: func(s *EndpointSpec) { s.Ports[0].Link, s.Ports[1].Link = "down", "degraded" },
			want: map[string]float64{"p1": 0.2, "p2": 0.4, "p3": 0.4}},
		"switch drained": {spec: func(s *EndpointSpec) { s.Ports[3].Drained = true },
			want: map[string]float64{"p0": 0.333333, "p1": 0.333333, "p2": 0.333333}},
		"only drained left": {
			spec:   func(s *EndpointSpec) { s.Ports[0].Link, s.Ports[1].Link = "down", "down" },
			planes: func(p []PlaneStatus) { p[2].State = "down"; p[3].State, p[3].Drained = "draining", true },
			want:   map[string]float64{"p3": 1}, fallback: true},
		"nothing live": {planes: func(p []PlaneStatus) {
			for i := range p {
				p[i].State = "down"
			}
		}, want: map[string]float64{"p0": 0.25, "p1": 0.25, "p2": 0.25, "p3": 0.25}, fallback: true},
	} {
		spec, planes := testSpec(), testPlanes()
		if tc.spec != nil {
			tc.spec(&spec)
		}
		if tc.planes != nil {
			tc.planes(planes)
		}
		ps, rate := Resolve(spec, planes)
		if got := weights(ps); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: weights %v, want %v", name, got, tc.want)
		}
		if (ps.Fallback != "") != tc.fallback {
			t.Errorf("%s: fallback %q", name, ps.Fallback)
		}
		if !reflect.DeepEqual(rate.PlaneCaps, tc.caps) {
			t.Errorf("%s: caps %v, want %v", name, rate.PlaneCaps, tc.caps)
		}
		doc := Configuration(spec, GenerationDoc{Generation: 9, PlanesGeneration: 7, Planes: planes})
		if doc.Generation != 7 || doc.Validate("a", 4) != nil {
			t.Errorf("%s: configuration generation %d, %v", name, doc.Generation, doc.Validate("a", 4))
		}
	}
}

func TestSpecAndGenerationValidate(t *testing.T) {
	good := testSpec()
	if err := good.Validate("a", 4); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*EndpointSpec){
		"other endpoint": func(s *EndpointSpec) { s.Endpoint = "b" },
		"old schema":     func(s *EndpointSpec) { s.Schema = "1.1" },
		"no generation":  func(s *EndpointSpec) { s.Generation = 0 },
		"no port":        func(s *EndpointSpec) { s.Ports = nil },
		"index range":    func(s *EndpointSpec) { s.Ports[3].Index = 4 },
		"plane twice":    func(s *EndpointSpec) { s.Ports[1].Plane = "p0" },
		"bad address":    func(s *EndpointSpec) { s.Ports[0].Address = "host" },
		"bad link":       func(s *EndpointSpec) { s.Ports[0].Link = "flapping" },
		"entropy":        func(s *EndpointSpec) { s.Entropy = 0 },
		"factor":         func(s *EndpointSpec) { s.DegradedLinkFactor = 2 },
		"rate":           func(s *EndpointSpec) { s.EgressBps = -1 },
	} {
		s := testSpec()
		s.Ports = append([]SpecPort(nil), s.Ports...)
		edit(&s)
		if err := s.Validate("a", 4); !errors.Is(err, ErrInvalidDocument) {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
	gen := GenerationDoc{Schema: SchemaVersion, Generation: 5, PlanesGeneration: 5, Planes: testPlanes()}
	if err := gen.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*GenerationDoc){
		"old schema":      func(g *GenerationDoc) { g.Schema = "" },
		"planes ahead":    func(g *GenerationDoc) { g.PlanesGeneration = 6 },
		"same name":       func(g *GenerationDoc) { g.Planes[1].Name = "p0" },
		"same index":      func(g *GenerationDoc) { g.Planes[1].Index = 0 },
		"state":           func(g *GenerationDoc) { g.Planes[0].State = "on fire" },
		"ratio":           func(g *GenerationDoc) { g.Planes[0].CapacityRatio = 1.5 },
		"changed":         func(g *GenerationDoc) { g.Changed = make([]string, MaxChanged+1) },
		"spread":          func(g *GenerationDoc) { g.StatusSpreadMS = MaxStatusSpreadMS + 1 },
		"negative spread": func(g *GenerationDoc) { g.StatusSpreadMS = -1 },
	} {
		g := gen
		g.Planes = testPlanes()
		edit(&g)
		if err := g.Validate(); !errors.Is(err, ErrInvalidDocument) {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
}
