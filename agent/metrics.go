package agent

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// counters are kept as atomics so an agent costs nothing in metrics until
// Collector is asked for (thousands of agents share a benchmark process).
type counters struct {
	appliesEtcd, appliesLKG, rejected, applyErrors, statusErrors atomic.Uint64
}

// Collector returns the agent's metrics (namespace multiplane, subsystem
// agent). Register it once per process, for its one agent.
func (a *Agent) Collector() prometheus.Collector {
	opts := func(name, help string, labels prometheus.Labels) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "multiplane", Subsystem: "agent", Name: name, Help: help, ConstLabels: labels}
	}
	load := func(v *atomic.Uint64) func() float64 { return func() float64 { return float64(v.Load()) } }
	applied := "Documents applied to the transport, by source."
	return collectors{
		prometheus.NewCounterFunc(opts("applies_total", applied, prometheus.Labels{"source": SourceEtcd}), load(&a.ctr.appliesEtcd)),
		prometheus.NewCounterFunc(opts("applies_total", applied, prometheus.Labels{"source": SourceLKG}), load(&a.ctr.appliesLKG)),
		prometheus.NewCounterFunc(opts("rejected_documents_total", "Documents rejected as invalid; the last good one stayed applied.", nil), load(&a.ctr.rejected)),
		prometheus.NewCounterFunc(opts("apply_errors_total", "Documents the transport refused; the last good one stayed applied.", nil), load(&a.ctr.applyErrors)),
		prometheus.NewCounterFunc(opts("status_write_errors_total", "Failed attempts to write the status to etcd.", nil), load(&a.ctr.statusErrors)),
		prometheus.NewCounterFunc(opts("etcd_reads_total", "Reads of the endpoint's document and the generation key (at start and after every failed watch).", nil),
			func() float64 { return float64(a.reads.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "multiplane", Subsystem: "agent", Name: "applied_generation",
			Help: "Fabric generation of the document applied."}, func() float64 { return float64(a.status().AppliedGeneration) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "multiplane", Subsystem: "agent", Name: "errors",
			Help: "Errors the status currently reports."}, func() float64 { return float64(len(a.status().Errors)) }),
	}
}

type collectors []prometheus.Collector

func (cs collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range cs {
		c.Describe(ch)
	}
}

func (cs collectors) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cs {
		c.Collect(ch)
	}
}
