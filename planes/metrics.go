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
	planeUtilDesc = prometheus.NewDesc("multiplane_planes_utilization_ratio",
		"Traffic of a plane over its usable capacity, from the switches' latest counter rates.", []string{"plane"}, nil)
	planeLossDesc = prometheus.NewDesc("multiplane_planes_loss_ratio",
		"Errors and discards per packet on a plane's links, from the latest counter rates.", []string{"plane"}, nil)
	planeECNDesc = prometheus.NewDesc("multiplane_planes_ecn_ratio",
		"ECN-marked output packets per output packet on a plane's links.", []string{"plane"}, nil)
	linkStateDesc = prometheus.NewDesc("multiplane_planes_link_state",
		"State of a link that is not up: 1 degraded, 2 down (up links have no series; multiplane_planes_links counts them).", []string{"link", "plane"}, nil)
)

// linkStateValue is a link state as a number for the link_state gauge.
var linkStateValue = map[LinkState]float64{LinkUp: 0, LinkDegraded: 1, LinkDown: 2}

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
	ch <- planeUtilDesc
	ch <- planeLossDesc
	ch <- planeECNDesc
	ch <- linkStateDesc
	c.detect.Describe(ch)
}

// Collect copies the states under the engine's read lock and sends them
// after releasing it: sending 32,000 link series while holding it kept
// telemetry (which takes the write lock) waiting for the whole scrape.
func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	e := c.e
	type planeRow struct {
		name  string
		state PlaneState
		h     PlaneHealth // with rates
	}
	type linkRow struct {
		name, plane string
		state       LinkState
	}
	type switchRow struct {
		name      string
		reachable bool
	}
	e.mu.RLock()
	planeRows := make([]planeRow, 0, len(e.planes))
	for name, ph := range e.planes {
		planeRows = append(planeRows, planeRow{name, ph.state, withRates(ph, ph.health)})
	}
	// Links that are up have no series: 128,000 of them at 16,000
	// endpoints made each scrape 10 MB and a second of CPU.
	var linkRows []linkRow
	for _, lh := range e.links {
		if lh.state != LinkUp {
			linkRows = append(linkRows, linkRow{lh.link.Name, lh.link.Plane, lh.state})
		}
	}
	switchRows := make([]switchRow, 0, len(e.switches))
	for name, sh := range e.switches {
		switchRows = append(switchRows, switchRow{name, sh.reachable})
	}
	e.mu.RUnlock()

	for _, p := range planeRows {
		for _, st := range []PlaneState{PlaneHealthy, PlaneDegraded, PlaneDown, PlaneDraining} {
			v := 0.0
			if p.state == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(planeStateDesc, prometheus.GaugeValue, v, p.name, string(st))
		}
		h := p.h
		ch <- prometheus.MustNewConstMetric(planeCapacityDesc, prometheus.GaugeValue, float64(h.CapacityBps), p.name)
		ch <- prometheus.MustNewConstMetric(planeCapacityRatioDesc, prometheus.GaugeValue, h.CapacityRatio, p.name)
		ch <- prometheus.MustNewConstMetric(linksDesc, prometheus.GaugeValue, float64(h.LinksUp), p.name, string(LinkUp))
		ch <- prometheus.MustNewConstMetric(linksDesc, prometheus.GaugeValue, float64(h.LinksDegraded), p.name, string(LinkDegraded))
		ch <- prometheus.MustNewConstMetric(linksDesc, prometheus.GaugeValue, float64(h.LinksDown), p.name, string(LinkDown))
		ch <- prometheus.MustNewConstMetric(planeUtilDesc, prometheus.GaugeValue, h.Utilization, p.name)
		ch <- prometheus.MustNewConstMetric(planeLossDesc, prometheus.GaugeValue, h.LossRate, p.name)
		ch <- prometheus.MustNewConstMetric(planeECNDesc, prometheus.GaugeValue, h.ECNRate, p.name)
	}
	for _, l := range linkRows {
		ch <- prometheus.MustNewConstMetric(linkStateDesc, prometheus.GaugeValue, linkStateValue[l.state], l.name, l.plane)
	}
	for _, sw := range switchRows {
		v := 0.0
		if sw.reachable {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(switchStateDesc, prometheus.GaugeValue, v, sw.name)
	}
	c.detect.Collect(ch)
}
