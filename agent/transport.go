package agent

import (
	"fmt"
	"sync"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/transport"
)

// TransportApplier applies documents to a running *transport.Transport.
type TransportApplier struct {
	t *transport.Transport

	mu    sync.Mutex
	names []string // plane index → plane name, from the last document
}

// NewTransportApplier returns an Applier for t.
func NewTransportApplier(t *transport.Transport) *TransportApplier {
	return &TransportApplier{t: t}
}

// Planes is the transport's number of planes.
func (a *TransportApplier) Planes() int { return a.t.Planes() }

// PathSetFor maps a document's path set to the transport's: planes by
// index, with their weight and entropy, tagged with the generation.
func PathSetFor(doc contract.EndpointDoc) transport.PathSet {
	ps := transport.PathSet{Generation: doc.Generation, Planes: make([]transport.PlanePaths, len(doc.PathSet.Planes))}
	for i, p := range doc.PathSet.Planes {
		ps.Planes[i] = transport.PlanePaths{Plane: p.Index, Weight: p.Weight, Entropy: p.Entropy}
	}
	return ps
}

// bpsToRate converts bits per second to the transport's bytes per second.
func bpsToRate(bps int64) transport.Rate {
	if bps <= 0 {
		return 0
	}
	return transport.Rate(bps / 8)
}

// Apply sets the path set, then the rate policy (egress cap, ingress
// budget, per-plane caps), both at runtime.
func (a *TransportApplier) Apply(doc contract.EndpointDoc) error {
	if err := a.t.SetPathSet(PathSetFor(doc)); err != nil {
		return err
	}
	planes := a.t.Planes()
	names := make([]string, planes)
	index := map[string]int{}
	for _, p := range doc.PathSet.Planes {
		if p.Index >= 0 && p.Index < planes {
			names[p.Index] = p.Plane
		}
		index[p.Plane] = p.Index
	}
	a.mu.Lock()
	for i := range names {
		if names[i] == "" && i < len(a.names) {
			names[i] = a.names[i] // keep names of planes not in this set
		}
	}
	a.names = names
	a.mu.Unlock()

	r := doc.RatePolicy
	caps := make([]transport.Rate, planes)
	for name, c := range r.PlaneCaps {
		i, ok := index[name]
		if !ok || i < 0 || i >= planes {
			continue // a plane not in the set carries no traffic
		}
		caps[i] = bpsToRate(c)
	}
	return a.t.SetRates(bpsToRate(r.EgressBps), bpsToRate(r.IngressBps), caps)
}

// Stats returns the transport's per-plane bytes and retransmits.
func (a *TransportApplier) Stats() []contract.PathStatus {
	st := a.t.Stats()
	a.mu.Lock()
	names := a.names
	a.mu.Unlock()
	out := make([]contract.PathStatus, len(st.Planes))
	for i, p := range st.Planes {
		name := ""
		if p.Plane < len(names) {
			name = names[p.Plane]
		}
		if name == "" {
			name = fmt.Sprintf("%d", p.Plane)
		}
		out[i] = contract.PathStatus{Plane: name, TxBytes: p.TxBytes, RxBytes: p.RxBytes, Retransmits: p.Retransmits}
	}
	return out
}
