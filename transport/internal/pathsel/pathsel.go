// Package pathsel chooses the path of every packet a connection sends.
//
// A path is a (local plane port, remote plane port, entropy) triple; the
// entropy is the UDP source port, which steers the packet through the
// plane's ECMP hash. A Selector sprays packets over its paths with smooth
// weighted round robin, restricted to the paths the caller says can send
// now (congestion window and pacing). It is path-aware: a path that lost a
// packet or saw ECN marks keeps only PenaltyFactor of its weight for one
// RTT; a path with RetireAfter consecutive timeouts is retired (its traffic
// moves to the others at once) and probed with one packet every
// ProbeInterval until an acknowledgement brings it back. The last active
// path is never retired.
//
// A Selector is not safe for concurrent use. Path sets are replaced by
// building a new Selector with New(paths, old): paths keep their state
// across the swap when their ID is unchanged, so the caller swaps one
// pointer and the change is atomic.
package pathsel

import (
	"time"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// Defaults.
const (
	DefaultPenaltyFactor     = 0.25
	DefaultLossPenaltyFactor = 0.75
	DefaultRetireAfter       = 3
	DefaultProbeInterval     = 20 * time.Millisecond
)

// Path describes one path.
type Path struct {
	ID      protocol.PathID
	Plane   int
	Entropy int
	Weight  float64
}

type entry struct {
	Path
	cur          float64
	penaltyUntil time.Time
	penalty      float64
	timeouts     int
	retired      bool
	nextProbe    time.Time
}

// Eligible says whether path i may send a packet now.
type Eligible interface {
	Eligible(i int) bool
}

// Selector picks paths. Index i refers to the i-th path given to New.
type Selector struct {
	paths             []entry
	PenaltyFactor     float64
	LossPenaltyFactor float64
	RetireAfter       int
	ProbeInterval     time.Duration
}

// New returns a selector over paths, carrying per-path state over from old
// (which may be nil) for paths with the same ID.
func New(paths []Path, old *Selector) *Selector {
	s := &Selector{
		paths:             make([]entry, len(paths)),
		PenaltyFactor:     DefaultPenaltyFactor,
		LossPenaltyFactor: DefaultLossPenaltyFactor,
		RetireAfter:       DefaultRetireAfter,
		ProbeInterval:     DefaultProbeInterval,
	}
	if old != nil {
		s.PenaltyFactor, s.LossPenaltyFactor = old.PenaltyFactor, old.LossPenaltyFactor
		s.RetireAfter, s.ProbeInterval = old.RetireAfter, old.ProbeInterval
	}
	for i, p := range paths {
		s.paths[i].Path = p
		if old != nil {
			for j := range old.paths {
				if o := old.paths[j]; o.ID == p.ID {
					s.paths[i] = o
					s.paths[i].Path = p
					break
				}
			}
		}
	}
	return s
}

// Len returns the number of paths.
func (s *Selector) Len() int { return len(s.paths) }

// Path returns path i.
func (s *Selector) Path(i int) Path { return s.paths[i].Path }

// Retired reports whether path i is retired.
func (s *Selector) Retired(i int) bool { return s.paths[i].retired }

// Active returns the number of paths that are not retired and have weight.
func (s *Selector) Active() int {
	n := 0
	for i := range s.paths {
		if !s.paths[i].retired && s.paths[i].Weight > 0 {
			n++
		}
	}
	return n
}

func (s *Selector) weight(e *entry, now time.Time) float64 {
	w := e.Weight
	if now.Before(e.penaltyUntil) {
		w *= e.penalty
	}
	return w
}

// Pick returns the path for the next packet among the eligible ones, or -1.
// avoid names a path to skip if any other is eligible (-1: none), used to
// resend lost data on another path.
func (s *Selector) Pick(now time.Time, el Eligible, avoid int) int {
	// A retired path whose probe is due gets it first: with the other
	// paths eligible it would otherwise never be probed, and never return.
	for i := range s.paths {
		if e := &s.paths[i]; e.Weight > 0 && e.retired && !now.Before(e.nextProbe) && el.Eligible(i) {
			e.nextProbe = now.Add(s.ProbeInterval)
			return i
		}
	}
	best, fallback := -1, -1
	total := 0.0
	for i := range s.paths {
		e := &s.paths[i]
		if e.Weight <= 0 || e.retired {
			continue
		}
		if !el.Eligible(i) {
			continue
		}
		if i == avoid {
			if fallback < 0 {
				fallback = i
			}
			continue
		}
		w := s.weight(e, now)
		e.cur += w
		total += w
		if best < 0 || e.cur > s.paths[best].cur {
			best = i
		}
	}
	if best < 0 {
		return fallback
	}
	s.paths[best].cur -= total
	return best
}

// NextProbe returns the earliest time a retired path may be probed, or
// the zero time if none is retired.
func (s *Selector) NextProbe() time.Time {
	var t time.Time
	for i := range s.paths {
		if e := &s.paths[i]; e.retired && (t.IsZero() || e.nextProbe.Before(t)) {
			t = e.nextProbe
		}
	}
	return t
}

// OnCongestion records an ECN mark or a congestive loss on path i: the
// path keeps PenaltyFactor of its weight for rtt.
func (s *Selector) OnCongestion(i int, now time.Time, rtt time.Duration) {
	s.penalize(i, now, now.Add(rtt), s.PenaltyFactor)
}

// OnLoss records an isolated loss on path i: the path keeps
// LossPenaltyFactor of its weight for rtt.
func (s *Selector) OnLoss(i int, now time.Time, rtt time.Duration) {
	s.penalize(i, now, now.Add(rtt), s.LossPenaltyFactor)
}

// penalize applies factor f until until; while a penalty is in force the
// stronger factor and the later end win.
func (s *Selector) penalize(i int, now, until time.Time, f float64) {
	e := &s.paths[i]
	if now.Before(e.penaltyUntil) {
		e.penalty = min(e.penalty, f)
		if until.After(e.penaltyUntil) {
			e.penaltyUntil = until
		}
		return
	}
	e.penalty, e.penaltyUntil = f, until
}

// OnAck records progress on path i, ending a retirement.
func (s *Selector) OnAck(i int) {
	e := &s.paths[i]
	e.timeouts = 0
	e.retired = false
}

// OnTimeout records a retransmission timeout on path i and reports whether
// the path is (now) retired.
func (s *Selector) OnTimeout(i int, now time.Time) bool {
	e := &s.paths[i]
	e.timeouts++
	s.penalize(i, now, now.Add(s.ProbeInterval), s.PenaltyFactor)
	if !e.retired && e.timeouts >= s.RetireAfter && s.Active() > 1 {
		e.retired = true
		e.nextProbe = now.Add(s.ProbeInterval)
	}
	return e.retired
}
