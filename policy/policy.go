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
	Endpoint string `json:"endpoint"`
	// Spec is the endpoint's own document; PathSet and Rate are it
	// resolved with the planes (contract.Resolve), as its agent does.
	Spec    contract.EndpointSpec `json:"-"`
	PathSet contract.PathSet      `json:"path_set"`
	Rate    contract.RatePolicy   `json:"rate_policy"`
	// Ports are all the endpoint's ports, for the directory peers read.
	Ports []contract.DirectoryPort `json:"ports"`
}

// Output is the computed policy, sorted by endpoint name.
type Output struct {
	Endpoints []EndpointPolicy
	Planes    []contract.PlaneStatus
	// Unusable are the ports peers should not send to for a reason of
	// their own (link down, switch or link drained), sorted; ports on a
	// down or drained plane are covered by Planes.
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
	out.Planes = planeStatuses(t, in.Health, drained[DrainPlane])
	planeIdx := map[string]int{}
	planeInfo := map[string]contract.PlaneStatus{}
	for _, st := range out.Planes {
		planeIdx[st.Name] = st.Index
		planeInfo[st.Name] = st
	}
	classes := map[string]RateClass{}
	for _, c := range in.Intents.Classes {
		classes[c.Name] = c
	}
	out.Endpoints = make([]EndpointPolicy, 0, len(t.Endpoints))
	for _, e := range t.Endpoints {
		ep, unusable := endpointPolicy(e, in, cfg, planeIdx, planeInfo, drained, classes, out.Planes)
		out.Endpoints = append(out.Endpoints, ep)
		out.Unusable = append(out.Unusable, unusable...)
	}
	slices.SortFunc(out.Endpoints, func(a, b EndpointPolicy) int { return strings.Compare(a.Endpoint, b.Endpoint) })
	slices.SortFunc(out.Unusable, func(a, b contract.PortRef) int {
		return cmp.Or(strings.Compare(a.Endpoint, b.Endpoint), strings.Compare(a.Plane, b.Plane))
	})
	return out
}

// Planes derives only the planes' shared statuses (Output.Planes): what
// a plane going down changes, without every endpoint's document.
func Planes(t *planes.Topology, h planes.Health, drains []Drain) []contract.PlaneStatus {
	drained := map[string]bool{}
	for _, d := range drains {
		if d.Kind == DrainPlane {
			drained[d.Target] = true
		}
	}
	return planeStatuses(t, h, drained)
}

func planeStatuses(t *planes.Topology, h planes.Health, drained map[string]bool) []contract.PlaneStatus {
	var out []contract.PlaneStatus
	for i, p := range t.Planes {
		ph, ok := h.PlaneHealth(p.Name)
		if !ok {
			ph = planes.PlaneHealth{State: planes.PlaneHealthy, CapacityRatio: 1}
		}
		st := contract.PlaneStatus{Name: p.Name, Index: i, State: string(ph.State), CapacityRatio: ph.CapacityRatio, Drained: drained[p.Name]}
		if st.Drained {
			st.State = string(planes.PlaneDraining)
		}
		// A down plane carries nothing, whatever fraction of its links
		// still answer: a plane failing link by link then changes its
		// shared key once, not again with every link after the one that
		// took it down.
		if ph.State == planes.PlaneDown {
			st.CapacityRatio = 0
		}
		out = append(out, st)
	}
	return out
}

func endpointPolicy(e planes.Endpoint, in Input, cfg Config, planeIdx map[string]int, planeInfo map[string]contract.PlaneStatus,
	drained map[DrainKind]map[string]bool, classes map[string]RateClass, all []contract.PlaneStatus) (EndpointPolicy, []contract.PortRef) {
	// Unassigned endpoints, and those whose class is gone, take the
	// default class: unlimited unless an operator defined "default".
	className := in.Intents.Assignments[e.Name]
	class, ok := classes[className]
	if !ok {
		className, class = DefaultClass, classes[DefaultClass]
	}
	spec := contract.EndpointSpec{Schema: contract.SchemaVersion, Endpoint: e.Name, Entropy: cfg.Entropy,
		DegradedLinkFactor: cfg.DegradedLinkFactor, Class: className, EgressBps: class.EgressBps, IngressBps: class.IngressBps}
	var unusable []contract.PortRef
	ports := make([]contract.DirectoryPort, len(e.Ports))
	spec.Ports = make([]contract.SpecPort, 0, len(e.Ports))
	snap, _ := in.Health.(*planes.HealthSnapshot)
	var buf [64]byte
	name := buf[:0]
	for i, p := range e.Ports {
		// The link's name, looked up without allocating it (4,000
		// endpoints x 8 planes per computation).
		name = append(append(append(name[:0], p.Switch...), ':'), p.Interface...)
		var lh planes.LinkHealth
		var ok bool
		if snap != nil {
			lh, ok = snap.Links[string(name)] // the links not up
		} else {
			lh, ok = in.Health.LinkHealth(string(name))
		}
		if !ok {
			lh = planes.LinkHealth{State: planes.LinkUp}
		}
		plane := planeInfo[p.Plane]
		sp := contract.SpecPort{Plane: p.Plane, Index: planeIdx[p.Plane], Address: p.Address.String(), SpeedBps: p.SpeedBps,
			Drained: drained[DrainSwitch][p.Switch] || (len(drained[DrainLink]) > 0 && drained[DrainLink][string(name)])}
		// A down plane covers its links' states: its failure leaves the
		// endpoint's document as it was.
		if lh.State != planes.LinkUp && plane.State != string(planes.PlaneDown) {
			sp.Link = string(lh.State)
		}
		if sp.Drained || sp.Link == string(planes.LinkDown) {
			unusable = append(unusable, contract.PortRef{Endpoint: e.Name, Plane: p.Plane})
		}
		spec.Ports = append(spec.Ports, sp)
		ports[i] = contract.DirectoryPort{Plane: sp.Plane, Index: sp.Index, Address: sp.Address}
	}
	slices.SortFunc(spec.Ports, func(a, b contract.SpecPort) int { return a.Index - b.Index })
	slices.SortFunc(ports, func(a, b contract.DirectoryPort) int { return a.Index - b.Index })
	ps, rate := contract.Resolve(spec, all)
	return EndpointPolicy{Endpoint: e.Name, Spec: spec, PathSet: ps, Rate: rate, Ports: ports}, unusable
}
