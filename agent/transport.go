package agent

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/transport"
)

// TransportApplier applies documents to a running *transport.Transport.
type TransportApplier struct {
	t *transport.Transport

	mu    sync.Mutex
	names []string // plane index → plane name, from the last document
	last  []lossSample
}

// lossSample is a plane's counters at the previous Stats, for LossRatio.
type lossSample struct{ retx, tx uint64 }

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

// Stats returns the transport's per-plane bytes, retransmits and loss
// ratio since the previous call, with the evidence of DefaultEvidence.
func (a *TransportApplier) Stats() []contract.PathStatus {
	st := a.t.Stats()
	ev := DefaultEvidence.Judge(a.t.Peers(), len(st.Planes), time.Now())
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.last) != len(st.Planes) {
		a.last = make([]lossSample, len(st.Planes))
	}
	out := make([]contract.PathStatus, len(st.Planes))
	for i, p := range st.Planes {
		out[i] = ev[i]
		out[i].Plane = a.name(p.Plane)
		out[i].TxBytes, out[i].RxBytes, out[i].Retransmits = p.TxBytes, p.RxBytes, p.Retransmits
		prev := a.last[i]
		if tx := p.TxPackets - prev.tx; tx > 0 && p.Retransmits >= prev.retx {
			out[i].LossRatio = math.Round(min(float64(p.Retransmits-prev.retx)/float64(tx), 1)*1e4) / 1e4
		}
		a.last[i] = lossSample{retx: p.Retransmits, tx: p.TxPackets}
	}
	return out
}

// Verdicts says, per plane, whether any peer is reachable and whether any
// is not; the agent writes its status at once when this changes.
func (a *TransportApplier) Verdicts() string {
	return verdicts(DefaultEvidence.Judge(a.t.Peers(), a.t.Planes(), time.Now()))
}

// name is plane i's name from the last document, or its index; a.mu held.
func (a *TransportApplier) name(i int) string {
	if i < len(a.names) && a.names[i] != "" {
		return a.names[i]
	}
	return fmt.Sprintf("%d", i)
}
