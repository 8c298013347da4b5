package history

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/multiplane/multiplane/planes"
)

// Errors.
var (
	ErrUnknown     = errors.New("history: no series of that name")
	ErrNotRecorded = errors.New("history: not recorded")
)

// Config sizes the history.
type Config struct {
	// Fine is how long 1 s samples are kept (default 1 h); Coarse how
	// long CoarseStep averages are (default 24 h of 1 min).
	Fine, Coarse, CoarseStep time.Duration
	// MaxLinks: link series are kept for topologies of at most this many
	// links (default 1024); planes always. A series costs 24 bytes a
	// sample: 84 KiB an hour at 1 s and 34 KiB a day at 1 min, so 1,024
	// links hold about 120 MiB.
	MaxLinks int
}

// DefaultConfig is an hour at 1 s, a day at 1 min, 1,024 links.
func DefaultConfig() Config {
	return Config{Fine: time.Hour, Coarse: 24 * time.Hour, CoarseStep: time.Minute, MaxLinks: 1024}
}

// state codes, worst last: a coarse step shows its worst state.
var codes = []string{"", "up", "healthy", "draining", "degraded", "down"}

func code(state string) uint8 {
	for i, s := range codes {
		if s == state {
			return uint8(i)
		}
	}
	return 0
}

// Recorder samples the health engine every second into per-plane and
// per-link series.
type Recorder struct {
	cfg    Config
	health planes.Health
	now    func() time.Time

	mu         sync.RWMutex
	planes     map[string]*series
	links      map[string]*series
	linksOff   int // links in the topology when over MaxLinks (0: recorded)
	planeNames []string
	linkNames  []string
}

// New returns a recorder of h.
func New(cfg Config, h planes.Health) *Recorder {
	d := DefaultConfig()
	if cfg.Fine <= 0 {
		cfg.Fine = d.Fine
	}
	if cfg.Coarse <= 0 {
		cfg.Coarse = d.Coarse
	}
	if cfg.CoarseStep < time.Second {
		cfg.CoarseStep = d.CoarseStep
	}
	if cfg.MaxLinks < 0 {
		cfg.MaxLinks = 0
	}
	return &Recorder{cfg: cfg, health: h, now: time.Now, planes: map[string]*series{}, links: map[string]*series{}}
}

func (r *Recorder) newSeries() *series {
	return newSeries(int(r.cfg.Fine/time.Second), int(r.cfg.Coarse/r.cfg.CoarseStep), r.cfg.CoarseStep)
}

// SetTopology sets the planes and links to record, keeping the series of
// those that remain.
func (r *Recorder) SetTopology(t *planes.Topology, links []planes.Link) {
	r.mu.Lock()
	defer r.mu.Unlock()
	keep := func(old map[string]*series, names []string) map[string]*series {
		out := make(map[string]*series, len(names))
		for _, n := range names {
			if s := old[n]; s != nil {
				out[n] = s
			} else {
				out[n] = r.newSeries()
			}
		}
		return out
	}
	r.planeNames = r.planeNames[:0]
	for _, p := range t.Planes {
		r.planeNames = append(r.planeNames, p.Name)
	}
	r.planes = keep(r.planes, r.planeNames)
	r.linkNames, r.linksOff = r.linkNames[:0], 0
	if len(links) > r.cfg.MaxLinks {
		r.linksOff = len(links)
	} else {
		for _, l := range links {
			r.linkNames = append(r.linkNames, l.Name)
		}
	}
	r.links = keep(r.links, r.linkNames)
}

// Sample records every plane and link once, at now.
func (r *Recorder) Sample() {
	sec := toSec(r.now().Unix())
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.planeNames {
		h, ok := r.health.PlaneHealth(n)
		if !ok {
			continue
		}
		r.planes[n].add(point{sec: sec, util: float32(h.Utilization), loss: float32(h.LossRate), ecn: float32(h.ECNRate),
			capacity: float32(h.CapacityRatio), state: code(string(h.State))})
	}
	for _, n := range r.linkNames {
		h, ok := r.health.LinkHealth(n)
		if !ok {
			continue
		}
		p := point{sec: sec, state: code(string(h.State))}
		if rt := h.Rates; rt != nil {
			p.loss, p.ecn = float32(rt.LossRatio()), float32(rt.ECNRatio())
			p.util = float32(rt.TrafficBps()) // bit/s: the link's speed is the caller's
		}
		r.links[n].add(p)
	}
}

// Run samples every second until ctx ends.
func (r *Recorder) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Sample()
		}
	}
}

// Columns are a series as parallel arrays (what chart libraries take):
// T in Unix seconds, one entry per step.
type Columns struct {
	Name        string    `json:"name"`
	StepSeconds int64     `json:"step_seconds"`
	T           []int64   `json:"t"`
	State       []string  `json:"state"`
	Utilization []float32 `json:"utilization,omitempty"`
	// TrafficBps is a link's traffic (the larger direction), in bit/s.
	TrafficBps    []float32 `json:"traffic_bps,omitempty"`
	LossRate      []float32 `json:"loss_rate"`
	ECNRate       []float32 `json:"ecn_rate"`
	CapacityRatio []float32 `json:"capacity_ratio,omitempty"`
}

// Plane returns a plane's series from since on: at 1 s when since is
// within the fine window (and coarse is false), else at CoarseStep.
func (r *Recorder) Plane(name string, since time.Time, coarse bool) (Columns, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s := r.planes[name]
	if s == nil {
		return Columns{}, fmt.Errorf("%w: plane %q", ErrUnknown, name)
	}
	c := Columns{Utilization: []float32{}, CapacityRatio: []float32{}}
	r.fill(&c, name, s, since, coarse, func(p point) {
		c.Utilization = append(c.Utilization, p.util)
		c.CapacityRatio = append(c.CapacityRatio, p.capacity)
	})
	return c, nil
}

// Link returns a link's series from since on, as Plane does.
func (r *Recorder) Link(name string, since time.Time, coarse bool) (Columns, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s := r.links[name]
	if s == nil {
		if r.linksOff > 0 {
			return Columns{}, fmt.Errorf("%w: link series are kept for at most %d links, and the topology has %d", ErrNotRecorded, r.cfg.MaxLinks, r.linksOff)
		}
		return Columns{}, fmt.Errorf("%w: link %q", ErrUnknown, name)
	}
	c := Columns{TrafficBps: []float32{}}
	r.fill(&c, name, s, since, coarse, func(p point) { c.TrafficBps = append(c.TrafficBps, p.util) })
	return c, nil
}

// fill appends s's points from since on to c, from the coarse ring when
// asked or when since is older than the fine window; more appends what
// is particular to the subject. r.mu held.
func (r *Recorder) fill(c *Columns, name string, s *series, since time.Time, coarse bool, more func(point)) {
	rg, step := s.fine, int64(1)
	if coarse || r.now().Sub(since) > r.cfg.Fine {
		rg, step = s.coarse, int64(r.cfg.CoarseStep/time.Second)
	}
	c.Name, c.StepSeconds = name, step
	c.T, c.State, c.LossRate, c.ECNRate = []int64{}, []string{}, []float32{}, []float32{}
	rg.each(toSec(since.Unix()), func(p point) {
		c.T = append(c.T, fromSec(p.sec))
		c.State = append(c.State, codes[p.state])
		c.LossRate = append(c.LossRate, p.loss)
		c.ECNRate = append(c.ECNRate, p.ecn)
		more(p)
	})
}
