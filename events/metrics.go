package events

import "github.com/prometheus/client_golang/prometheus"

type writerMetrics struct {
	written, lost, failures, caughtUp, stale prometheus.Counter
	pending                                  prometheus.Gauge
}

func newWriterMetrics() writerMetrics {
	return writerMetrics{
		written: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "multiplane", Subsystem: "events",
			Name: "written_total", Help: "Events written to the history."}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "multiplane", Subsystem: "events",
			Name: "lost_total", Help: "Events lost before reaching the history (each gap is also recorded as a history_gap event)."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "multiplane", Subsystem: "events",
			Name: "write_failures_total", Help: "Failed appends to the history (retried)."}),
		caughtUp: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "multiplane", Subsystem: "events",
			Name: "caught_up_total", Help: "State changes recorded on taking the history over: they happened while no replica recorded."}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "multiplane", Subsystem: "events",
			Name: "stale_dropped_total", Help: "Events a deposed leader held and did not write: a later leader records the history."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "multiplane", Subsystem: "events",
			Name: "pending", Help: "Events held by the history writer, not yet written."}),
	}
}

// Collector returns the writer's metrics; register it once.
func (w *Writer) Collector() prometheus.Collector { return &w.metrics }

func (m *writerMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.written, m.lost, m.failures, m.caughtUp, m.stale, m.pending}
}

func (m *writerMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

func (m *writerMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}
