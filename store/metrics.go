package store

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns a Prometheus collector for the connection pool's
// statistics, read at scrape time (multiplane_store_pool_*). Register it
// once per DB.
func (db *DB) Collector() prometheus.Collector { return &poolCollector{pool: db.pool} }

const (
	namespace = "multiplane"
	subsystem = "store_pool"
)

func desc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, name), help, nil, nil)
}

var (
	descAcquiredConns     = desc("acquired_conns", "Connections currently acquired from the pool.")
	descIdleConns         = desc("idle_conns", "Idle connections in the pool.")
	descConstructingConns = desc("constructing_conns", "Connections being established.")
	descTotalConns        = desc("total_conns", "Connections in the pool (acquired, idle and constructing).")
	descMaxConns          = desc("max_conns", "Maximum size of the pool.")
	descAcquires          = desc("acquires_total", "Successful acquires from the pool.")
	descAcquireSeconds    = desc("acquire_duration_seconds_total", "Time spent in successful acquires, in seconds.")
	descEmptyAcquires     = desc("empty_acquires_total", "Successful acquires that had to wait for a connection because the pool was empty.")
	descCanceledAcquires  = desc("canceled_acquires_total", "Acquires cancelled by their context.")
	descNewConns          = desc("new_conns_total", "Connections opened.")
	descLifetimeDestroys  = desc("max_lifetime_destroys_total", "Connections closed for exceeding the maximum lifetime.")
	descIdleDestroys      = desc("max_idle_destroys_total", "Connections closed for exceeding the maximum idle time.")
)

type poolCollector struct{ pool *pgxpool.Pool }

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descAcquiredConns, descIdleConns, descConstructingConns, descTotalConns, descMaxConns,
		descAcquires, descAcquireSeconds, descEmptyAcquires, descCanceledAcquires,
		descNewConns, descLifetimeDestroys, descIdleDestroys,
	} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(descAcquiredConns, float64(s.AcquiredConns()))
	gauge(descIdleConns, float64(s.IdleConns()))
	gauge(descConstructingConns, float64(s.ConstructingConns()))
	gauge(descTotalConns, float64(s.TotalConns()))
	gauge(descMaxConns, float64(s.MaxConns()))
	counter(descAcquires, float64(s.AcquireCount()))
	counter(descAcquireSeconds, s.AcquireDuration().Seconds())
	counter(descEmptyAcquires, float64(s.EmptyAcquireCount()))
	counter(descCanceledAcquires, float64(s.CanceledAcquireCount()))
	counter(descNewConns, float64(s.NewConnsCount()))
	counter(descLifetimeDestroys, float64(s.MaxLifetimeDestroyCount()))
	counter(descIdleDestroys, float64(s.MaxIdleDestroyCount()))
}
