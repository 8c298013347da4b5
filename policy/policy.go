// Package policy computes, for every endpoint, the path set it should
// spray over and the rate policy it should enforce, from the topology, the
// live health of planes and links, and operator intents (drains, rate
// classes). Compute is a pure, deterministic function: the same inputs give
// the same documents whatever the order of maps and slices inside them.
//
//	out := policy.Compute(policy.Input{Topology: topo, Health: engine, Intents: intents}, policy.DefaultConfig())
//	for _, ep := range out.Endpoints { ... ep.PathSet ... ep.Rate ... }
//
// Package policy/publish writes the result to etcd (docs/etcd-layout.md).
package policy

import (
	"cmp"
	"math"
	"slices"
	"strings"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/planes"
)

// Config tunes the computation.
type Config struct {
	// Entropy is the number of paths (UDP source ports) per plane.
	Entropy int
	// DegradedLinkFactor scales the weight of a port whose link is degraded.
	DegradedLinkFactor float64
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config { return Config{Entropy: 4, DegradedLinkFactor: 0.5} }

// DrainKind is what a drain targets.
type DrainKind string

// Drain targets.
const (
	DrainPlane  DrainKind = "plane"
	DrainSwitch DrainKind = "switch"
	DrainLink   DrainKind = "link"
)

// Drain is an operator's request to move traffic off a target.
type Drain struct {
	ID     int64     `json:"id"`
	Kind   DrainKind `json:"subject_kind"`
	Target string    `json:"subject"`
}

// RateClass is a named rate setting operators assign to endpoints.
type RateClass struct {
	Name       string `json:"name"`
	EgressBps  int64  `json:"egress_bps"`  // 0: unlimited
	IngressBps int64  `json:"ingress_bps"` // 0: unlimited
	Priority   int    `json:"priority"`
}

// Intents are the operators' standing requests.
type Intents struct {
	Drains      []Drain
	Classes     []RateClass
	Assignments map[string]string // endpoint → class
}

// Input is everything Compute depends on.
type Input struct {
	Topology *planes.Topology
	Health   planes.Health
	Intents  Intents
}

// EndpointPolicy is the result for one endpoint.
type EndpointPolicy struct {
	Endpoint string              `json:"endpoint"`
	PathSet  contract.PathSet    `json:"path_set"`
	Rate     contract.RatePolicy `json:"rate_policy"`
	// Ports are all the endpoint's ports, for the directory peers read.
	Ports []contract.DirectoryPort `json:"ports"`
}

// Output is the computed policy, sorted by endpoint name.
type Output struct {
	Endpoints []EndpointPolicy
	Planes    []contract.PlaneStatus
	// Unusable are the ports peers should not send to, sorted.
	Unusable []contract.PortRef
}

// DefaultClass names the rate class of endpoints without an assignment.
const DefaultClass = "default"

// Compute derives every endpoint's path set and rate policy.
func Compute(in Input, cfg Config) Output {
	// A live engine is read through one snapshot: the result never mixes
	// states from before and after a transition.
	in.Health = planes.Snapshot(in.Health)
	t := in.Topology
	if cfg.Entropy <= 0 {
		cfg.Entropy = 1
	}
	drained := map[DrainKind]map[string]bool{DrainPlane: {}, DrainSwitch: {}, DrainLink: {}}
	for _, d := range in.Intents.Drains {
		if m := drained[d.Kind]; m != nil {
			m[d.Target] = true
		}
	}
	var out Output
	planeIdx := map[string]int{}
	planeInfo := map[string]contract.PlaneStatus{}
	for i, p := range t.Planes {
		planeIdx[p.Name] = i
		ph, ok := in.Health.PlaneHealth(p.Name)
		if !ok {
			ph = planes.PlaneHealth{State: planes.PlaneHealthy, CapacityRatio: 1}
		}
		st := contract.PlaneStatus{Name: p.Name, Index: i, State: string(ph.State), CapacityRatio: ph.CapacityRatio, Drained: drained[DrainPlane][p.Name]}
		if st.Drained {
			st.State = string(planes.PlaneDraining)
		}
		planeInfo[p.Name] = st
		out.Planes = append(out.Planes, st)
	}
	classes := map[string]RateClass{}
	for _, c := range in.Intents.Classes {
		classes[c.Name] = c
	}
	for _, e := range t.Endpoints {
		ep, unusable := endpointPolicy(e, in, cfg, planeIdx, planeInfo, drained, classes)
		out.Endpoints = append(out.Endpoints, ep)
		out.Unusable = append(out.Unusable, unusable...)
	}
	slices.SortFunc(out.Endpoints, func(a, b EndpointPolicy) int { return strings.Compare(a.Endpoint, b.Endpoint) })
	slices.SortFunc(out.Unusable, func(a, b contract.PortRef) int {
		return cmp.Or(strings.Compare(a.Endpoint, b.Endpoint), strings.Compare(a.Plane, b.Plane))
	})
	return out
}

func endpointPolicy(e planes.Endpoint, in Input, cfg Config, planeIdx map[string]int, planeInfo map[string]contract.PlaneStatus,
	drained map[DrainKind]map[string]bool, classes map[string]RateClass) (EndpointPolicy, []contract.PortRef) {
	type candidate struct {
		port      planes.Port
		linkUp    bool
		preferred bool
		weight    float64
	}
	var cands []candidate
	for _, p := range e.Ports {
		link := planes.LinkName(p.Switch, p.Interface)
		lh, ok := in.Health.LinkHealth(link)
		if !ok {
			lh = planes.LinkHealth{State: planes.LinkUp}
		}
		ps := planeInfo[p.Plane]
		c := candidate{port: p, linkUp: lh.State != planes.LinkDown}
		c.preferred = c.linkUp && !ps.Drained && ps.State != string(planes.PlaneDown) &&
			!drained[DrainSwitch][p.Switch] && !drained[DrainLink][link]
		c.weight = math.Max(ps.CapacityRatio, 0.01)
		if lh.State == planes.LinkDegraded {
			c.weight *= cfg.DegradedLinkFactor
		}
		cands = append(cands, c)
	}
	pick := func(keep func(candidate) bool) []candidate {
		var out []candidate
		for _, c := range cands {
			if keep(c) {
				out = append(out, c)
			}
		}
		return out
	}
	ps := contract.PathSet{}
	chosen := pick(func(c candidate) bool { return c.preferred })
	if len(chosen) == 0 {
		// Never strand an endpoint: use what still has a live link, even
		// if drained or on a plane judged down, and failing that, everything.
		ps.Fallback = "no preferred plane: using planes with a live link"
		chosen = pick(func(c candidate) bool { return c.linkUp })
		for i := range chosen {
			chosen[i].weight = 1
		}
	}
	if len(chosen) == 0 {
		ps.Fallback = "no live link: using every port"
		chosen = pick(func(candidate) bool { return true })
		for i := range chosen {
			chosen[i].weight = 1
		}
	}
	total := 0.0
	for _, c := range chosen {
		total += c.weight
	}
	for _, c := range chosen {
		ps.Planes = append(ps.Planes, contract.PlanePath{
			Plane: c.port.Plane, Index: planeIdx[c.port.Plane], Address: c.port.Address.String(),
			Weight: roundWeight(c.weight / total), Entropy: cfg.Entropy,
		})
	}
	slices.SortFunc(ps.Planes, func(a, b contract.PlanePath) int { return a.Index - b.Index })
	var unusable []contract.PortRef
	ports := make([]contract.DirectoryPort, len(cands))
	for i, c := range cands {
		if !c.preferred {
			unusable = append(unusable, contract.PortRef{Endpoint: e.Name, Plane: c.port.Plane})
		}
		ports[i] = contract.DirectoryPort{Plane: c.port.Plane, Index: planeIdx[c.port.Plane], Address: c.port.Address.String()}
	}
	slices.SortFunc(ports, func(a, b contract.DirectoryPort) int { return a.Index - b.Index })

	// Unassigned endpoints, and those whose class is gone, take the
	// default class: unlimited unless an operator defined "default".
	className := in.Intents.Assignments[e.Name]
	class, ok := classes[className]
	if !ok {
		className, class = DefaultClass, classes[DefaultClass]
	}
	rate := contract.RatePolicy{Class: className, EgressBps: class.EgressBps, IngressBps: class.IngressBps}
	for _, p := range e.Ports {
		info := planeInfo[p.Plane]
		if p.SpeedBps > 0 && info.CapacityRatio < 1 {
			if rate.PlaneCaps == nil {
				rate.PlaneCaps = map[string]int64{}
			}
			rate.PlaneCaps[p.Plane] = int64(float64(p.SpeedBps) * info.CapacityRatio)
		}
	}
	return EndpointPolicy{Endpoint: e.Name, PathSet: ps, Rate: rate, Ports: ports}, unusable
}

// roundWeight keeps documents stable across float noise.
func roundWeight(w float64) float64 { return math.Round(w*1e6) / 1e6 }
