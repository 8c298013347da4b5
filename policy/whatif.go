package policy

import (
	"slices"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/planes"
)

// EndpointImpact is how a change would affect one endpoint.
type EndpointImpact struct {
	Endpoint       string   `json:"endpoint"`
	PlanesBefore   []string `json:"planes_before"`
	PlanesAfter    []string `json:"planes_after"`
	CapacityBefore float64  `json:"capacity_before"` // fraction of the endpoint's port capacity usable
	CapacityAfter  float64  `json:"capacity_after"`
	Stranded       bool     `json:"stranded"` // no preferred plane would be left
}

// Impact is the what-if of adding a drain.
type Impact struct {
	Affected []EndpointImpact `json:"affected"`
	Stranded []string         `json:"stranded"`
}

// WhatIf computes the policy with and without an extra drain and reports
// the endpoints whose path set would change, and those it would strand.
func WhatIf(in Input, cfg Config, extra Drain) Impact {
	in.Health = planes.Snapshot(in.Health) // before and after see the same states
	before := Compute(in, cfg)
	after := in
	after.Intents.Drains = append(slices.Clone(in.Intents.Drains), extra)
	afterOut := Compute(after, cfg)
	speeds := map[string]map[string]int64{}
	for _, e := range in.Topology.Endpoints {
		speeds[e.Name] = map[string]int64{}
		for _, p := range e.Ports {
			speeds[e.Name][p.Plane] = max(p.SpeedBps, 1)
		}
	}
	imp := Impact{Affected: []EndpointImpact{}, Stranded: []string{}}
	for i, b := range before.Endpoints {
		a := afterOut.Endpoints[i]
		pb, pa := planeNames(b.PathSet), planeNames(a.PathSet)
		stranded := a.PathSet.Fallback != "" && b.PathSet.Fallback == ""
		if slices.Equal(pb, pa) && !stranded && a.PathSet.Fallback == b.PathSet.Fallback {
			continue
		}
		ei := EndpointImpact{Endpoint: b.Endpoint, PlanesBefore: pb, PlanesAfter: pa,
			CapacityBefore: capacity(b.PathSet, speeds[b.Endpoint]), CapacityAfter: capacity(a.PathSet, speeds[a.Endpoint]), Stranded: stranded}
		if stranded {
			ei.CapacityAfter = 0
			imp.Stranded = append(imp.Stranded, b.Endpoint)
		}
		imp.Affected = append(imp.Affected, ei)
	}
	return imp
}

func planeNames(ps contract.PathSet) []string {
	out := make([]string, len(ps.Planes))
	for i, p := range ps.Planes {
		out[i] = p.Plane
	}
	return out
}

// capacity is the fraction of an endpoint's port capacity in its path set.
func capacity(ps contract.PathSet, speeds map[string]int64) float64 {
	if ps.Fallback != "" {
		return 0
	}
	var used, total int64
	for _, s := range speeds {
		total += s
	}
	for _, p := range ps.Planes {
		used += speeds[p.Plane]
	}
	if total == 0 {
		return 0
	}
	return float64(used) / float64(total)
}
