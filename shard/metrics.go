package shard

import "github.com/prometheus/client_golang/prometheus"

// Ownership moves counted in multiplane_shard_moves_total.
const (
	moveClaim    = "claim"    // a free switch (its owner's lease expired)
	moveTakeover = "takeover" // from a live owner, make-before-break
)

type metrics struct {
	owned      prometheus.Gauge
	replicas   prometheus.Gauge
	moves      *prometheus.CounterVec
	viewWrites prometheus.Counter
	imports    prometheus.Counter
}

func newMetrics() *metrics {
	const ns, sub = "multiplane", "shard"
	m := &metrics{
		owned: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "switches_owned",
			Help: "Switches this replica owns (streams and judges for all replicas)."}),
		replicas: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "replicas",
			Help: "Live replicas sharing the switches, as this one sees them."}),
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "moves_total",
			Help: "Switches this replica came to own, by how: claim (free) or takeover (make-before-break)."}, []string{"how"}),
		viewWrites: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "view_writes_total",
			Help: "Switch views written to etcd for the other replicas."}),
		imports: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "view_imports_total",
			Help: "Other replicas' switch views taken into the health engine."}),
	}
	m.moves.WithLabelValues(moveClaim)
	m.moves.WithLabelValues(moveTakeover)
	return m
}

// Register registers the sharder's metrics (namespace multiplane,
// subsystem shard).
func (s *Sharder) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{s.m.owned, s.m.replicas, s.m.moves, s.m.viewWrites, s.m.imports} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
