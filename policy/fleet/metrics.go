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
	agentsDesc = prometheus.NewDesc("multiplane_fleet_agents",
		"Endpoints of the topology by agent state: current (applied the target generation), behind, silent (no live status).", []string{"state"}, nil)
	appliedDesc = prometheus.NewDesc("multiplane_fleet_agent_applied_generation",
		"The generation an agent behind the target or silent applied (0: no status); agents that are current have no series.", []string{"endpoint"}, nil)
	reportingDesc = prometheus.NewDesc("multiplane_fleet_agent_reporting",
		"1 when an agent behind the target has a live status in etcd, 0 when silent; agents that are current have no series.", []string{"endpoint"}, nil)
	readErrorsDesc = prometheus.NewDesc("multiplane_fleet_read_errors_total",
		"Scrapes whose etcd read of the agents' statuses failed.", nil, nil)
)

// Collector exports, at each scrape, the published generation, how many
// endpoints of the topology are current, behind or silent, and for the
// first MaxListed of those behind or silent their applied generation and
// whether they report (endpoints lists the topology's names, so agents
// cannot add series; a series per endpoint made a scrape of 16,000
// endpoints 32,000 series). Each scrape is one etcd read, bounded by 5 s.
func (r *Reader) Collector(endpoints func(context.Context) ([]string, error)) prometheus.Collector {
	return &collector{r: r, endpoints: endpoints}
}

// MaxListed bounds the endpoints a scrape names.
const MaxListed = 1000

type collector struct {
	r         *Reader
	endpoints func(context.Context) ([]string, error)
	errs      atomic.Uint64
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- targetDesc
	ch <- agentsDesc
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
	var current, behind, silent, listed int
	for _, name := range names {
		st, ok := s.statuses[name]
		reporting := 0.0
		switch {
		case !ok:
			silent++
		case st.AppliedGeneration >= s.target:
			current++
			continue
		default:
			behind++
			reporting = 1
		}
		if listed < MaxListed {
			listed++
			ch <- prometheus.MustNewConstMetric(appliedDesc, prometheus.GaugeValue, float64(st.AppliedGeneration), name)
			ch <- prometheus.MustNewConstMetric(reportingDesc, prometheus.GaugeValue, reporting, name)
		}
	}
	ch <- prometheus.MustNewConstMetric(agentsDesc, prometheus.GaugeValue, float64(current), "current")
	ch <- prometheus.MustNewConstMetric(agentsDesc, prometheus.GaugeValue, float64(behind), "behind")
	ch <- prometheus.MustNewConstMetric(agentsDesc, prometheus.GaugeValue, float64(silent), "silent")
}
