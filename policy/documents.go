package policy

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"
)

// Keys of the etcd layout (docs/etcd-layout.md).
const (
	Prefix          = "/multiplane/v1/"
	KeyGeneration   = Prefix + "fabric/generation"
	KeyPlanes       = Prefix + "fabric/planes"
	KeyPorts        = Prefix + "fabric/ports"
	PrefixEndpoints = Prefix + "endpoints/"
	PrefixDirectory = Prefix + "directory/"
	PrefixStatus    = Prefix + "status/"
	PrefixLeader    = Prefix + "leader/"
)

// KeyEndpoint is the key of an endpoint's document.
func KeyEndpoint(name string) string { return PrefixEndpoints + name }

// KeyDirectory is the key of an endpoint's directory entry.
func KeyDirectory(name string) string { return PrefixDirectory + name }

// KeyStatus is the key of an endpoint's status.
func KeyStatus(name string) string { return PrefixStatus + name }

// GenerationDoc marks a complete update; written last.
type GenerationDoc struct {
	Generation       uint64    `json:"generation"`
	ComputedAt       time.Time `json:"computed_at"`
	TopologyRevision int64     `json:"topology_revision"`
	Leader           string    `json:"leader"`
}

// PlanesDoc is every plane's state as endpoints see it.
type PlanesDoc struct {
	Generation uint64        `json:"generation"`
	Planes     []PlaneStatus `json:"planes"`
}

// EndpointDoc is an endpoint's configuration.
type EndpointDoc struct {
	Generation uint64     `json:"generation"`
	Endpoint   string     `json:"endpoint"`
	PathSet    PathSet    `json:"path_set"`
	RatePolicy RatePolicy `json:"rate_policy"`
}

// DirectoryPort is one port in the directory.
type DirectoryPort struct {
	Plane   string `json:"plane"`
	Index   int    `json:"index"`
	Address string `json:"address"`
}

// PortRef names an endpoint's port on a plane.
type PortRef struct {
	Endpoint string `json:"endpoint"`
	Plane    string `json:"plane"`
}

// PortsDoc lists, fabric-wide, the endpoint ports not to send to (their
// link is down, or drained): peers avoid them.
type PortsDoc struct {
	Generation uint64    `json:"generation"`
	Unusable   []PortRef `json:"unusable"`
}

// DirectoryDoc lists an endpoint's per-plane addresses, for its peers. It
// changes only with the topology; usability is in PortsDoc.
type DirectoryDoc struct {
	Generation uint64          `json:"generation"`
	Endpoint   string          `json:"endpoint"`
	Ports      []DirectoryPort `json:"ports"`
}

// PathStatus is an agent's per-plane counters.
type PathStatus struct {
	Plane       string `json:"plane"`
	TxBytes     uint64 `json:"tx_bytes"`
	RxBytes     uint64 `json:"rx_bytes"`
	Retransmits uint64 `json:"retransmits"`
}

// StatusDoc is what an agent reports under its lease.
type StatusDoc struct {
	Endpoint          string       `json:"endpoint"`
	AppliedGeneration uint64       `json:"applied_generation"`
	AppliedAt         time.Time    `json:"applied_at"`
	Source            string       `json:"source"` // etcd or last-known-good
	Version           string       `json:"version"`
	Errors            []string     `json:"errors,omitempty"`
	Paths             []PathStatus `json:"paths,omitempty"`
}

// ErrInvalidDocument is wrapped by every validation error.
var ErrInvalidDocument = errors.New("policy: invalid document")

// Validate checks what an agent must be able to rely on: its own name,
// at least one plane, distinct planes and indices, valid addresses, positive
// weights summing to 1, entropy in range and non-negative rates.
func (d *EndpointDoc) Validate(endpoint string, planes int) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidDocument, fmt.Sprintf(format, args...))
	}
	if d.Endpoint != endpoint {
		return bad("document is for endpoint %q, not %q", d.Endpoint, endpoint)
	}
	if d.Generation == 0 {
		return bad("generation is missing")
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
