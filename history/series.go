package history

import (
	"time"
)

// Sample is one subject's figures at one time. State is a plane's or
// link's state name; Util, Loss and ECN are ratios.
type Sample struct {
	Util, Loss, ECN, Capacity float32
	State                     string
}

// point is a stored sample: its second (since base, to fit 32 bits) and
// figures, with the state as a small code (see codes): 24 bytes.
type point struct {
	sec                       uint32
	util, loss, ecn, capacity float32
	state                     uint8
}

// base is the Unix second stored seconds count from (2023-11-14).
const base = 1_700_000_000

func toSec(unix int64) uint32 { return uint32(max(unix-base, 0)) }

func fromSec(s uint32) int64 { return int64(s) + base }

// ring keeps the last len(pts) points in time order.
type ring struct {
	pts  []point
	next int // where the next point goes
	n    int // points stored
}

func newRing(n int) *ring { return &ring{pts: make([]point, n)} }

func (r *ring) add(p point) {
	r.pts[r.next] = p
	r.next = (r.next + 1) % len(r.pts)
	r.n = min(r.n+1, len(r.pts))
}

// each calls f for the points from second since on, oldest first.
func (r *ring) each(since uint32, f func(point)) {
	start := (r.next - r.n + len(r.pts)) % len(r.pts)
	for i := 0; i < r.n; i++ {
		p := r.pts[(start+i)%len(r.pts)]
		if p.sec >= since {
			f(p)
		}
	}
}

// series is a subject's samples at two resolutions: every Step for Fine
// points, and the average (worst state) of each Coarse step for Coarse
// points.
type series struct {
	fine, coarse *ring
	acc          point // the coarse step being filled
	accN         int
	coarseStep   uint32
}

func newSeries(fine, coarse int, coarseStep time.Duration) *series {
	return &series{fine: newRing(fine), coarse: newRing(coarse), coarseStep: uint32(coarseStep / time.Second)}
}

func (s *series) add(p point) {
	s.fine.add(p)
	unix := fromSec(p.sec)
	bucket := toSec(unix - unix%int64(s.coarseStep)) // steps aligned on Unix time
	if s.accN > 0 && s.acc.sec != bucket {
		s.flush()
	}
	if s.accN == 0 {
		s.acc = point{sec: bucket}
	}
	s.acc.util += p.util
	s.acc.loss += p.loss
	s.acc.ecn += p.ecn
	s.acc.capacity += p.capacity
	s.acc.state = max(s.acc.state, p.state)
	s.accN++
}

// flush stores the coarse step being filled, averaged.
func (s *series) flush() {
	n := float32(s.accN)
	a := s.acc
	a.util, a.loss, a.ecn, a.capacity = a.util/n, a.loss/n, a.ecn/n, a.capacity/n
	s.coarse.add(a)
	s.accN = 0
}
