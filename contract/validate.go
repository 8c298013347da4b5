package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
)

// ErrInvalidDocument is wrapped by every validation error.
var ErrInvalidDocument = errors.New("contract: invalid document")

// Validate checks what an agent must be able to rely on: a schema version
// it reads (CheckReportSchema), its own name,
// at least one plane, distinct planes and indices, valid addresses, positive
// weights summing to 1, entropy in range and non-negative rates.
func (d *EndpointDoc) Validate(endpoint string, planes int) error {
	if err := checkHeader(CheckReportSchema, d.Schema, d.Endpoint, endpoint, d.Generation); err != nil {
		return err
	}
	if len(d.PathSet.Planes) == 0 {
		return bad("path set has no plane")
	}
	seen := map[int]bool{}
	sum := 0.0
	for _, p := range d.PathSet.Planes {
		if p.Index < 0 || (planes > 0 && p.Index >= planes) {
			return bad("plane %q index %d out of range (this endpoint has %d planes)", p.Plane, p.Index, planes)
		}
		if seen[p.Index] {
			return bad("plane index %d listed twice", p.Index)
		}
		seen[p.Index] = true
		if _, err := netip.ParseAddr(p.Address); err != nil {
			return bad("plane %q address %q: %v", p.Plane, p.Address, err)
		}
		if !(p.Weight > 0) || math.IsInf(p.Weight, 0) {
			return bad("plane %q weight %v is not positive", p.Plane, p.Weight)
		}
		if p.Entropy < 1 || p.Entropy > 64 {
			return bad("plane %q entropy %d not in 1..64", p.Plane, p.Entropy)
		}
		sum += p.Weight
	}
	if math.Abs(sum-1) > 1e-3 {
		return bad("weights sum to %v, not 1", sum)
	}
	r := d.RatePolicy
	if r.EgressBps < 0 || r.IngressBps < 0 {
		return bad("negative rate")
	}
	for p, c := range r.PlaneCaps {
		if c < 0 {
			return bad("negative cap on plane %q", p)
		}
	}
	return nil
}

// bad is an ErrInvalidDocument with a message.
func bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidDocument, fmt.Sprintf(format, args...))
}

// checkHeader checks what every endpoint document starts with: a schema
// check reads, the endpoint's own name, a generation.
func checkHeader(check func(string) error, schema, name, endpoint string, generation uint64) error {
	if err := check(schema); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidDocument, err)
	}
	if name != endpoint {
		return bad("document is for endpoint %q, not %q", name, endpoint)
	}
	if generation == 0 {
		return bad("generation is missing")
	}
	return nil
}

// Bounds of a status document, which fabricd reads from every agent.
const (
	MaxStatusBytes   = 128 << 10
	MaxStatusPaths   = 64
	MaxPeersPerPlane = 64
	maxStatusErrors  = 32
	maxPeerCount     = 1 << 20
)

// ParseStatus decodes and checks the status an agent wrote under
// endpoint's key. A status is the agent's claim, so fabricd believes only
// what is well formed: its own name, a schema it reads, bounded lists and
// valid addresses.
func ParseStatus(endpoint string, data []byte) (StatusDoc, error) {
	var st StatusDoc
	bad := func(format string, args ...any) (StatusDoc, error) {
		return StatusDoc{}, fmt.Errorf("%w: status of %s: %s", ErrInvalidDocument, endpoint, fmt.Sprintf(format, args...))
	}
	if len(data) > MaxStatusBytes {
		return bad("%d bytes, more than %d", len(data), MaxStatusBytes)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return bad("%v", err)
	}
	if err := CheckReportSchema(st.Schema); err != nil {
		return bad("%v", err)
	}
	if st.Endpoint != endpoint {
		return bad("names endpoint %q", st.Endpoint)
	}
	if len(st.Paths) > MaxStatusPaths || len(st.Errors) > maxStatusErrors {
		return bad("%d paths and %d errors, more than %d and %d", len(st.Paths), len(st.Errors), MaxStatusPaths, maxStatusErrors)
	}
	for _, p := range st.Paths {
		if len(p.Peers) > MaxPeersPerPlane {
			return bad("plane %q: %d peers, more than %d", p.Plane, len(p.Peers), MaxPeersPerPlane)
		}
		if math.IsNaN(p.LossRatio) || p.LossRatio < 0 || p.LossRatio > 1 || p.RTTMicros < 0 {
			return bad("plane %q: loss ratio %v or RTT %d out of range", p.Plane, p.LossRatio, p.RTTMicros)
		}
		if p.PeersReachable < 0 || p.PeersUnreachable < 0 || p.PeersReachable > maxPeerCount || p.PeersUnreachable > maxPeerCount {
			return bad("plane %q: peer counts %d and %d out of range", p.Plane, p.PeersReachable, p.PeersUnreachable)
		}
		for _, pp := range p.Peers {
			if _, err := netip.ParseAddr(pp.Address); err != nil {
				return bad("plane %q: peer address: %v", p.Plane, err)
			}
		}
	}
	return st, nil
}

// Validate checks an endpoint document as the agent receives it: a schema
// it reads, its own name, a generation, at least one port, distinct planes
// and indices in range, valid addresses, known link states, entropy in
// range and non-negative rates.
func (s *EndpointSpec) Validate(endpoint string, planes int) error {
	if err := checkHeader(CheckSchema, s.Schema, s.Endpoint, endpoint, s.Generation); err != nil {
		return err
	}
	if len(s.Ports) == 0 {
		return bad("no port")
	}
	seenIdx, seenPlane := map[int]bool{}, map[string]bool{}
	for _, p := range s.Ports {
		if p.Index < 0 || (planes > 0 && p.Index >= planes) {
			return bad("plane %q index %d out of range (this endpoint has %d planes)", p.Plane, p.Index, planes)
		}
		if seenIdx[p.Index] || seenPlane[p.Plane] {
			return bad("plane %q (index %d) listed twice", p.Plane, p.Index)
		}
		seenIdx[p.Index], seenPlane[p.Plane] = true, true
		if _, err := netip.ParseAddr(p.Address); err != nil {
			return bad("plane %q address %q: %v", p.Plane, p.Address, err)
		}
		if p.Link != "" && p.Link != linkDown && p.Link != linkDegraded {
			return bad("plane %q link state %q is not down or degraded", p.Plane, p.Link)
		}
		if p.SpeedBps < 0 {
			return bad("plane %q speed %d is negative", p.Plane, p.SpeedBps)
		}
	}
	if s.Entropy < 1 || s.Entropy > 64 {
		return bad("entropy %d not in 1..64", s.Entropy)
	}
	if !(s.DegradedLinkFactor > 0 && s.DegradedLinkFactor <= 1) {
		return bad("degraded link factor %v not in (0, 1]", s.DegradedLinkFactor)
	}
	if s.EgressBps < 0 || s.IngressBps < 0 {
		return bad("negative rate")
	}
	return nil
}

// Validate checks a generation document as an agent receives it: a schema
// it reads, a generation, planes with distinct names and indices, known
// states, capacity ratios in [0, 1], and a bounded list of changed
// endpoints.
func (g *GenerationDoc) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: generation document: %s", ErrInvalidDocument, fmt.Sprintf(format, args...))
	}
	if err := CheckSchema(g.Schema); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidDocument, err)
	}
	if g.Generation == 0 || g.PlanesGeneration > g.Generation {
		return bad("generation %d, planes generation %d", g.Generation, g.PlanesGeneration)
	}
	names, idx := map[string]bool{}, map[int]bool{}
	for _, p := range g.Planes {
		if p.Name == "" || names[p.Name] || idx[p.Index] || p.Index < 0 {
			return bad("plane %q (index %d) unnamed, repeated or out of range", p.Name, p.Index)
		}
		names[p.Name], idx[p.Index] = true, true
		switch p.State {
		case "healthy", "degraded", planeDown, "draining":
		default:
			return bad("plane %q state %q unknown", p.Name, p.State)
		}
		if !(p.CapacityRatio >= 0 && p.CapacityRatio <= 1) {
			return bad("plane %q capacity ratio %v not in [0, 1]", p.Name, p.CapacityRatio)
		}
	}
	if len(g.Changed) > MaxChanged {
		return bad("%d changed endpoints, more than %d", len(g.Changed), MaxChanged)
	}
	if g.StatusSpreadMS < 0 || g.StatusSpreadMS > MaxStatusSpreadMS {
		return bad("status spread %d ms not in [0, %d]", g.StatusSpreadMS, MaxStatusSpreadMS)
	}
	return nil
}

// CheckPlanes reports whether planes (a generation document's) has the
// state of every plane an endpoint document's ports are on, at the same
// index: a plane missing from it would resolve as healthy.
func CheckPlanes(spec EndpointSpec, planes []PlaneStatus) error {
	for _, p := range spec.Ports {
		i := slices.IndexFunc(planes, func(s PlaneStatus) bool { return s.Name == p.Plane })
		if i < 0 {
			return fmt.Errorf("%w: generation document has no state for plane %q", ErrInvalidDocument, p.Plane)
		}
		if planes[i].Index != p.Index {
			return fmt.Errorf("%w: plane %q is index %d in the generation document, %d in the endpoint's", ErrInvalidDocument, p.Plane, planes[i].Index, p.Index)
		}
	}
	return nil
}
