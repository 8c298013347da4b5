package fleet

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	targetDesc = prometheus.NewDesc("multiplane_fleet_target_generation",
		"The fabric generation the generation key announces.", nil, nil)
	appliedDesc = prometheus.NewDesc("multiplane_fleet_agent_applied_generation",
		"The generation an endpoint's agent applied (0: no status).", []string{"endpoint"}, nil)
	reportingDesc = prometheus.NewDesc("multiplane_fleet_agent_reporting",
		"1 when the endpoint's agent has a live status in etcd.", []string{"endpoint"}, nil)
	readErrorsDesc = prometheus.NewDesc("multiplane_fleet_read_errors_total",
		"Scrapes whose etcd read of the agents' statuses failed.", nil, nil)
)

// Collector exports, at each scrape, every endpoint of the topology's
// applied generation and whether its agent reports (one series each:
// endpoints lists the topology's names, so agents cannot add series),
// and the published generation. Each scrape is one etcd read, bounded by
// 5 s.
func (r *Reader) Collector(endpoints func(context.Context) ([]string, error)) prometheus.Collector {
	return &collector{r: r, endpoints: endpoints}
}

type collector struct {
	r         *Reader
	endpoints func(context.Context) ([]string, error)
	errs      atomic.Uint64
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- targetDesc
	ch <- appliedDesc
	ch <- reportingDesc
	ch <- readErrorsDesc
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	names, err := c.endpoints(ctx)
	var s snapshot
	if err == nil {
		s, err = c.r.read(ctx)
	}
	if err != nil {
		ch <- prometheus.MustNewConstMetric(readErrorsDesc, prometheus.CounterValue, float64(c.errs.Add(1)))
		return
	}
	ch <- prometheus.MustNewConstMetric(readErrorsDesc, prometheus.CounterValue, float64(c.errs.Load()))
	ch <- prometheus.MustNewConstMetric(targetDesc, prometheus.GaugeValue, float64(s.target))
	for _, name := range names {
		st, ok := s.statuses[name]
		reporting := 0.0
		if ok {
			reporting = 1
		}
		ch <- prometheus.MustNewConstMetric(appliedDesc, prometheus.GaugeValue, float64(st.AppliedGeneration), name)
		ch <- prometheus.MustNewConstMetric(reportingDesc, prometheus.GaugeValue, reporting, name)
	}
}
