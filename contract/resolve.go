package contract

import (
	"math"
	"slices"
)

// Plane and link states as documents name them.
const (
	planeDown    = "down"
	linkDown     = "down"
	linkDegraded = "degraded"
)

// Resolve computes the path set and rate policy of an endpoint from its
// own document and the planes' states. fabricd's policy and the agent both
// call it, so what the agent applies is what fabricd computed.
//
// A port is preferred when its link is up or degraded, its plane is neither
// down nor drained and its switch or link is not drained; preferred ports
// share the traffic by their plane's capacity ratio (times the degraded
// link factor). With no preferred port the endpoint is never stranded: it
// uses the ports with a live link on a drained plane (or with a drained
// switch or link), and failing that every port, equally.
func Resolve(spec EndpointSpec, planes []PlaneStatus) (PathSet, RatePolicy) {
	info := func(name string) PlaneStatus {
		for _, p := range planes {
			if p.Name == name {
				return p
			}
		}
		return PlaneStatus{Name: name, State: "healthy", CapacityRatio: 1}
	}
	type candidate struct {
		live      bool // a live link, as far as the documents tell
		preferred bool
		weight    float64
	}
	var buf [16]candidate // fabricd resolves thousands of endpoints per computation
	cands := buf[:0]
	nPreferred, nLive := 0, 0
	for _, p := range spec.Ports {
		ps := info(p.Plane)
		c := candidate{live: p.Link != linkDown && ps.State != planeDown}
		c.preferred = c.live && !ps.Drained && !p.Drained
		c.weight = math.Max(ps.CapacityRatio, 0.01)
		if p.Link == linkDegraded {
			c.weight *= spec.DegradedLinkFactor
		}
		nPreferred, nLive = nPreferred+b2i(c.preferred), nLive+b2i(c.live)
		cands = append(cands, c)
	}
	var ps PathSet
	keep := func(c candidate) bool { return c.preferred }
	equal := false // every chosen port weighs the same
	switch {
	case nPreferred > 0:
	case nLive > 0:
		ps.Fallback = "no preferred plane: using planes with a live link"
		keep, equal = func(c candidate) bool { return c.live }, true
	default:
		ps.Fallback = "no live link: using every port"
		keep, equal = func(candidate) bool { return true }, true
	}
	total := 0.0
	for i, c := range cands {
		if keep(c) {
			if equal {
				cands[i].weight = 1
			}
			total += cands[i].weight
		}
	}
	ps.Planes = make([]PlanePath, 0, len(cands))
	for i, c := range cands {
		if keep(c) {
			p := spec.Ports[i]
			ps.Planes = append(ps.Planes, PlanePath{Plane: p.Plane, Index: p.Index, Address: p.Address,
				Weight: roundWeight(c.weight / total), Entropy: spec.Entropy})
		}
	}
	slices.SortFunc(ps.Planes, func(a, b PlanePath) int { return a.Index - b.Index })

	rate := RatePolicy{Class: spec.Class, EgressBps: spec.EgressBps, IngressBps: spec.IngressBps}
	for _, p := range spec.Ports {
		if r := info(p.Plane).CapacityRatio; p.SpeedBps > 0 && r < 1 {
			if rate.PlaneCaps == nil {
				rate.PlaneCaps = map[string]int64{}
			}
			rate.PlaneCaps[p.Plane] = int64(float64(p.SpeedBps) * r)
		}
	}
	return ps, rate
}

// Configuration resolves spec with the planes of gen into the document
// the agent applies. Its generation is the later of the two documents'
// content generations, so it changes exactly when what is applied may.
func Configuration(spec EndpointSpec, gen GenerationDoc) EndpointDoc {
	ps, rate := Resolve(spec, gen.Planes)
	return EndpointDoc{Schema: SchemaVersion, Generation: max(spec.Generation, gen.PlanesGeneration),
		Endpoint: spec.Endpoint, PathSet: ps, RatePolicy: rate}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// roundWeight keeps documents stable across float noise.
func roundWeight(w float64) float64 { return math.Round(w*1e6) / 1e6 }
