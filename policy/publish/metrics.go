package publish

import "github.com/prometheus/client_golang/prometheus"

// Collector returns the publisher's metrics; register it before Run.
func (p *Publisher) Collector() prometheus.Collector {
	m := &metrics{
		publications: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "multiplane", Subsystem: "policy",
			Name: "publications_total", Help: "Generations published by this replica."}),
		writes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "multiplane", Subsystem: "policy",
			Name: "etcd_writes_total", Help: "Documents written to etcd (generation key included)."}),
		deletes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "multiplane", Subsystem: "policy",
			Name: "etcd_deletes_total", Help: "Documents deleted from etcd."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "multiplane", Subsystem: "policy",
			Name: "etcd_written_bytes_total", Help: "Bytes of keys and documents written to etcd."}),
		txns: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "multiplane", Subsystem: "policy",
			Name: "etcd_txns_total", Help: "etcd transactions committed."}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "multiplane", Subsystem: "policy",
			Name: "publish_duration_seconds", Help: "Time to write one generation to etcd.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		compute: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "multiplane", Subsystem: "policy",
			Name: "compute_duration_seconds", Help: "Time to compute the policy of one published generation.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "multiplane", Subsystem: "policy",
			Name: "generation", Help: "Latest generation this replica published."}),
		drift: prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "multiplane", Subsystem: "policy",
			Name: "drift_repairs_total", Help: "Documents found changed in etcd behind the leader's back, and rewritten."},
			func() float64 { return float64(p.driftRepairs.Load()) }),
		reconciliations: prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "multiplane", Subsystem: "policy",
			Name: "reconciliations_total", Help: "Times the leader re-read its documents from etcd to look for drift."},
			func() float64 { return float64(p.reconciliations.Load()) }),
		refusals: prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "multiplane", Subsystem: "policy",
			Name: "generation_refusals_total", Help: "Publications refused because the next generation would exceed 2^53 (a corrupt generation in etcd)."},
			func() float64 { return float64(p.refusals.Load()) }),
		leader: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "multiplane", Subsystem: "policy",
			Name: "leader", Help: "1 while this replica is the policy leader."}, func() float64 {
			if p.IsLeader() {
				return 1
			}
			return 0
		}),
	}
	prev := p.onResult
	p.onResult = func(r Result) {
		m.publications.Inc()
		m.writes.Add(float64(r.Written))
		m.deletes.Add(float64(r.Deleted))
		m.bytes.Add(float64(r.Bytes))
		m.txns.Add(float64(r.Txns))
		m.duration.Observe(r.Duration.Seconds())
		m.compute.Observe(r.Compute.Seconds())
		m.generation.Set(float64(r.Generation))
		if prev != nil {
			prev(r)
		}
	}
	return m
}

type metrics struct {
	publications, writes, deletes, bytes, txns prometheus.Counter
	duration, compute                          prometheus.Histogram
	generation                                 prometheus.Gauge
	drift, reconciliations, refusals           prometheus.CounterFunc
	leader                                     prometheus.GaugeFunc
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.publications, m.writes, m.deletes, m.bytes, m.txns, m.duration, m.compute, m.generation,
		m.drift, m.reconciliations, m.refusals, m.leader}
}

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}
