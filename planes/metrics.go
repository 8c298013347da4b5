package planes

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	planeStateDesc = prometheus.NewDesc("multiplane_planes_state",
		"Plane state: 1 for the current state, 0 for the others.", []string{"plane", "state"}, nil)
	planeCapacityDesc = prometheus.NewDesc("multiplane_planes_capacity_bps",
		"Link capacity of a plane still usable (links up or degraded), in bit/s.", []string{"plane"}, nil)
	planeCapacityRatioDesc = prometheus.NewDesc("multiplane_planes_capacity_ratio",
		"Fraction of a plane's link capacity still usable.", []string{"plane"}, nil)
	linksDesc = prometheus.NewDesc("multiplane_planes_links",
		"Links of a plane by state.", []string{"plane", "state"}, nil)
	switchStateDesc = prometheus.NewDesc("multiplane_planes_switch_reachable",
		"1 when the switch's telemetry stream is alive.", []string{"switch"}, nil)
)

// Collector exports plane, link and switch states, and observes detection
// latency (sample at the switch → plane state change) into a histogram.
func (e *Engine) Collector() prometheus.Collector {
	c := &engineCollector{e: e, detect: prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "multiplane", Subsystem: "planes", Name: "detection_latency_seconds",
		Help:    "Time from a change at a switch (its timestamp) to the plane state change it caused.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	})}
	prev := e.OnDetect
	e.OnDetect = func(d time.Duration) {
		c.detect.Observe(d.Seconds())
		if prev != nil {
			prev(d)
		}
	}
	return c
}

type engineCollector struct {
	e      *Engine
	detect prometheus.Histogram
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- planeStateDesc
	ch <- planeCapacityDesc
	ch <- planeCapacityRatioDesc
	ch <- linksDesc
	ch <- switchStateDesc
	c.detect.Describe(ch)
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	e := c.e
	e.mu.RLock()
	for name, ph := range e.planes {
		for _, st := range []PlaneState{PlaneHealthy, PlaneDegraded, PlaneDown, PlaneDraining} {
			v := 0.0
			if ph.state == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(planeStateDesc, prometheus.GaugeValue, v, name, string(st))
		}
		h := ph.health
		ch <- prometheus.MustNewConstMetric(planeCapacityDesc, prometheus.GaugeValue, float64(h.CapacityBps), name)
		ch <- prometheus.MustNewConstMetric(planeCapacityRatioDesc, prometheus.GaugeValue, h.CapacityRatio, name)
		ch <- prometheus.MustNewConstMetric(linksDesc, prometheus.GaugeValue, float64(h.LinksUp), name, string(LinkUp))
		ch <- prometheus.MustNewConstMetric(linksDesc, prometheus.GaugeValue, float64(h.LinksDegraded), name, string(LinkDegraded))
		ch <- prometheus.MustNewConstMetric(linksDesc, prometheus.GaugeValue, float64(h.LinksDown), name, string(LinkDown))
	}
	for name, sh := range e.switches {
		v := 0.0
		if sh.reachable {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(switchStateDesc, prometheus.GaugeValue, v, name)
	}
	e.mu.RUnlock()
	c.detect.Collect(ch)
}
