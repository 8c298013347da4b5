package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/multiplane/multiplane/planes"
)

// Errors of the package.
var (
	ErrConfig      = errors.New("telemetry: invalid config")
	ErrCredentials = errors.New("telemetry: credentials")
)

// Collector keeps one gNMI Subscribe stream per switch of the topology and
// feeds what they bring to a planes.Observer. Reconcile and Switches may be
// called at any time, from any goroutine.
type Collector struct {
	cfg Config
	obs planes.Observer
	log *slog.Logger
	m   *metrics

	mu       sync.Mutex
	runCtx   context.Context // nil while not running
	desired  map[string]switchSpec
	only     map[string]bool // Select's set; nil: every switch
	sessions map[string]*session
}

// switchSpec is what the collector needs of one topology switch.
type switchSpec struct {
	name   string
	target planes.GNMITarget
	ifaces []string // sorted
}

// SwitchStatus is the collector's view of one switch.
type SwitchStatus struct {
	Switch     string    `json:"switch"`
	Address    string    `json:"address"`
	Reachable  bool      `json:"reachable"`
	Synced     bool      `json:"synced"`
	Since      time.Time `json:"since"` // of the last reachability change
	Reason     string    `json:"reason"`
	LastUpdate time.Time `json:"last_update"` // zero before the first response
	Updates    uint64    `json:"updates"`
	Reconnects uint64    `json:"reconnects"`
	Interfaces int       `json:"interfaces"` // expected, from the topology
}

// New returns a collector feeding obs. obs is called from one goroutine per
// switch (so it must be safe for concurrent use) and must not keep the batch
// slice it is given after returning (the samples themselves may be kept).
func New(cfg Config, obs planes.Observer, log *slog.Logger) (*Collector, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if obs == nil {
		return nil, errors.New("telemetry: nil observer")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Collector{cfg: cfg, obs: obs, log: log.With("component", "telemetry"), m: newMetrics(),
		desired: map[string]switchSpec{}, sessions: map[string]*session{}}, nil
}

// Config returns the effective configuration (defaults filled in).
func (c *Collector) Config() Config { return c.cfg }

// Register registers the collector's metrics (namespace multiplane,
// subsystem telemetry).
func (c *Collector) Register(reg prometheus.Registerer) error {
	for _, col := range c.m.collectors() {
		if err := reg.Register(col); err != nil {
			return err
		}
	}
	return nil
}

// Reconcile makes the set of streams follow the topology: streams start for
// new switches, stop for removed ones, and restart for switches whose gNMI
// settings changed; a change of a switch's interfaces only is applied to
// its running stream. Before Run the topology is remembered and applied when
// Run starts.
func (c *Collector) Reconcile(t *planes.Topology) {
	specs := map[string]switchSpec{}
	if t != nil {
		for _, sw := range t.Switches {
			specs[sw.Name] = switchSpec{name: sw.Name, target: sw.GNMI}
		}
		for _, l := range t.Links() {
			if s, ok := specs[l.Switch]; ok {
				s.ifaces = append(s.ifaces, l.Interface)
				specs[l.Switch] = s
			}
		}
		for n, s := range specs {
			sort.Strings(s.ifaces)
			s.ifaces = slices.Compact(s.ifaces)
			specs[n] = s
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.desired = specs
	if c.runCtx != nil {
		c.apply()
	}
}

// Select restricts the streams to the named switches of the topology (nil:
// every switch), as when replicas share the switches (package shard).
func (c *Collector) Select(names map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if names != nil {
		names = maps.Clone(names)
	}
	c.only = names
	if c.runCtx != nil {
		c.apply()
	}
}

func (c *Collector) selected(name string) bool { return c.only == nil || c.only[name] }

// apply starts, stops and updates sessions to match c.desired. c.mu is held.
func (c *Collector) apply() {
	for name, s := range c.sessions {
		spec, ok := c.desired[name]
		ok = ok && c.selected(name)
		switch {
		case !ok:
			s.stop()
			delete(c.sessions, name)
			c.m.forget(name)
			if _, inTopology := c.desired[name]; inTopology {
				c.log.Info("switch no longer collected here", "switch", name)
			} else {
				c.log.Info("switch removed", "switch", name)
			}
		case !sameTarget(spec.target, s.spec.target):
			s.stop()
			c.log.Info("switch gNMI settings changed: reconnecting", "switch", name, "address", spec.target.Address)
			c.sessions[name] = c.start(spec)
		case !slices.Equal(spec.ifaces, s.spec.ifaces):
			s.setExpected(spec)
		}
	}
	for name, spec := range c.desired {
		if _, ok := c.sessions[name]; !ok && c.selected(name) {
			c.sessions[name] = c.start(spec)
		}
	}
}

func sameTarget(a, b planes.GNMITarget) bool {
	if (a.TLS == nil) != (b.TLS == nil) || (a.TLS != nil && *a.TLS != *b.TLS) {
		return false
	}
	a.TLS, b.TLS = nil, nil
	return a == b
}

// Run runs the streams until ctx ends, then stops them all. It returns nil
// on a clean stop.
func (c *Collector) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.runCtx != nil {
		c.mu.Unlock()
		return errors.New("telemetry: collector already running")
	}
	c.runCtx = ctx
	c.apply()
	c.mu.Unlock()

	<-ctx.Done()

	c.mu.Lock()
	defer c.mu.Unlock()
	for name, s := range c.sessions {
		s.stop()
		delete(c.sessions, name)
	}
	c.runCtx = nil
	return nil
}

// Switches returns the status of every switch being collected, by name.
func (c *Collector) Switches() []SwitchStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]SwitchStatus, 0, len(c.sessions))
	for _, s := range c.sessions {
		out = append(out, s.Status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Switch < out[j].Switch })
	return out
}
