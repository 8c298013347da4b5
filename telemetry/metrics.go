package telemetry

import "github.com/prometheus/client_golang/prometheus"

// Error kinds counted in multiplane_telemetry_errors_total.
const (
	ErrKindConnect      = "connect"       // dialing or opening the stream failed
	ErrKindStream       = "stream"        // an open stream ended with an error
	ErrKindSilent       = "silent"        // nothing received within the silence timeout
	ErrKindTypeMismatch = "type_mismatch" // a known leaf had a value of the wrong type
	ErrKindStale        = "stale"         // a timestamp not after the last one (ignored)
	ErrKindCounterReset = "counter_reset" // a counter went back or jumped absurdly (no rate)
	ErrKindAuth         = "auth"          // credentials could not be loaded
)

var errorKinds = []string{ErrKindConnect, ErrKindStream, ErrKindSilent, ErrKindTypeMismatch, ErrKindStale, ErrKindCounterReset, ErrKindAuth}

type metrics struct {
	connected  *prometheus.GaugeVec
	synced     *prometheus.GaugeVec
	updates    *prometheus.CounterVec
	reconnects *prometheus.CounterVec
	errors     *prometheus.CounterVec
	samples    prometheus.Counter
	batches    prometheus.Counter
}

func newMetrics() *metrics {
	const ns, sub = "multiplane", "telemetry"
	m := &metrics{
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "switch_connected",
			Help: "1 while the switch's gNMI stream is up (a response was received), else 0."}, []string{"switch"}),
		synced: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "switch_synced",
			Help: "1 once the current stream sent sync_response, else 0."}, []string{"switch"}),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "updates_total",
			Help: "gNMI leaf updates received."}, []string{"switch"}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "reconnects_total",
			Help: "Streams re-opened after a failure."}, []string{"switch"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "errors_total",
			Help: "Collection errors by kind: connect, stream, silent, type_mismatch, stale, counter_reset, auth."}, []string{"kind"}),
		samples: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "samples_total",
			Help: "Interface samples handed to the health engine."}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "batches_total",
			Help: "Sample batches handed to the health engine."}),
	}
	for _, k := range errorKinds {
		m.errors.WithLabelValues(k)
	}
	return m
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.connected, m.synced, m.updates, m.reconnects, m.errors, m.samples, m.batches}
}

func (m *metrics) forget(sw string) {
	m.connected.DeleteLabelValues(sw)
	m.synced.DeleteLabelValues(sw)
	m.updates.DeleteLabelValues(sw)
	m.reconnects.DeleteLabelValues(sw)
}
