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
	type candidate struct {
		port      SpecPort
		live      bool // a live link, as far as the documents tell
		preferred bool
		weight    float64
	}
	info := func(name string) PlaneStatus {
		for _, p := range planes {
			if p.Name == name {
				return p
			}
		}
		return PlaneStatus{Name: name, State: "healthy", CapacityRatio: 1}
	}
	cands := make([]candidate, 0, len(spec.Ports))
	for _, p := range spec.Ports {
		ps := info(p.Plane)
		c := candidate{port: p, live: p.Link != linkDown && ps.State != planeDown}
		c.preferred = c.live && !ps.Drained && !p.Drained
		c.weight = math.Max(ps.CapacityRatio, 0.01)
		if p.Link == linkDegraded {
			c.weight *= spec.DegradedLinkFactor
		}
		cands = append(cands, c)
	}
	pick := func(keep func(candidate) bool, equal bool) []candidate {
		var out []candidate
		for _, c := range cands {
			if keep(c) {
				if equal {
					c.weight = 1
				}
				out = append(out, c)
			}
		}
		return out
	}
	var ps PathSet
	chosen := pick(func(c candidate) bool { return c.preferred }, false)
	if len(chosen) == 0 {
		ps.Fallback = "no preferred plane: using planes with a live link"
		chosen = pick(func(c candidate) bool { return c.live }, true)
	}
	if len(chosen) == 0 {
		ps.Fallback = "no live link: using every port"
		chosen = pick(func(candidate) bool { return true }, true)
	}
	total := 0.0
	for _, c := range chosen {
		total += c.weight
	}
	for _, c := range chosen {
		ps.Planes = append(ps.Planes, PlanePath{Plane: c.port.Plane, Index: c.port.Index, Address: c.port.Address,
			Weight: roundWeight(c.weight / total), Entropy: spec.Entropy})
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

// roundWeight keeps documents stable across float noise.
func roundWeight(w float64) float64 { return math.Round(w*1e6) / 1e6 }
