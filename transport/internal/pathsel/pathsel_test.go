package pathsel

import (
	"testing"
	"time"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

type all struct{}

func (all) Eligible(int) bool { return true }

type only map[int]bool

func (o only) Eligible(i int) bool { return o[i] }

func paths(weights ...float64) []Path {
	ps := make([]Path, len(weights))
	for i, w := range weights {
		ps[i] = Path{ID: protocol.PathID(10 * i), Plane: i, Weight: w}
	}
	return ps
}

func count(s *Selector, now time.Time, n int, el Eligible) []int {
	c := make([]int, s.Len())
	for range n {
		if i := s.Pick(now, el, -1); i >= 0 {
			c[i]++
		}
	}
	return c
}

func TestWeightedSpray(t *testing.T) {
	s := New(paths(1, 1, 2, 0), nil)
	c := count(s, time.Unix(0, 0), 4000, all{})
	if c[0] != 1000 || c[1] != 1000 || c[2] != 2000 || c[3] != 0 {
		t.Fatalf("counts %v", c)
	}
	c = count(s, time.Unix(0, 0), 100, only{1: true})
	if c[1] != 100 {
		t.Fatalf("ineligible paths used: %v", c)
	}
}

func TestPenaltyLastsOneRTT(t *testing.T) {
	s := New(paths(1, 1, 1, 1), nil)
	now := time.Unix(0, 0)
	s.OnCongestion(0, now, time.Millisecond)
	c := count(s, now, 3250, all{})
	if c[0] > 300 || c[1] < 900 {
		t.Fatalf("penalized path used %v", c)
	}
	c = count(s, now.Add(time.Millisecond), 4000, all{})
	if c[0] < 900 {
		t.Fatalf("penalty did not expire: %v", c)
	}
}

func TestIsolatedLossPenaltyIsMild(t *testing.T) {
	s := New(paths(1, 1), nil)
	now := time.Unix(0, 0)
	s.OnLoss(0, now, time.Millisecond)
	c := count(s, now, 1750, all{})
	if c[0] < 700 || c[0] > 800 { // 0.75 : 1
		t.Fatalf("after an isolated loss: %v", c)
	}
	s.OnCongestion(0, now, time.Millisecond) // the stronger penalty wins
	c = count(s, now, 1250, all{})
	if c[0] > 300 {
		t.Fatalf("after ECN: %v", c)
	}
}

func TestRetireAndProbe(t *testing.T) {
	s := New(paths(1, 1), nil)
	now := time.Unix(0, 0)
	for i := 0; i < DefaultRetireAfter; i++ {
		s.OnTimeout(0, now)
	}
	if !s.Retired(0) || s.Active() != 1 {
		t.Fatal("not retired")
	}
	c := count(s, now, 100, all{})
	if c[0] != 0 {
		t.Fatalf("retired path used: %v", c)
	}
	// The last active path is never retired.
	for i := 0; i < 10; i++ {
		s.OnTimeout(1, now)
	}
	if s.Retired(1) {
		t.Fatal("last path retired")
	}
	// A due probe goes first, even while other paths can send (else a
	// busy connection never probes), and only once per interval.
	later := now.Add(DefaultProbeInterval)
	if c := count(s, later, 100, all{}); c[0] != 1 || c[1] != 99 {
		t.Fatalf("picks at the probe time %v, want 1 probe on path 0", c)
	}
	if c := count(s, later.Add(DefaultProbeInterval-1), 100, all{}); c[0] != 0 {
		t.Fatalf("picks within the interval %v, want no probe", c)
	}
	if got := s.Pick(later.Add(DefaultProbeInterval), only{0: true}, -1); got != 0 {
		t.Fatalf("probe pick %d with only path 0 eligible", got)
	}
	if got := s.Pick(later.Add(DefaultProbeInterval), only{0: true}, -1); got != -1 {
		t.Fatalf("second probe within interval: %d", got)
	}
	s.OnAck(0)
	if s.Retired(0) {
		t.Fatal("ack did not revive")
	}
}

func TestAvoidAndSwap(t *testing.T) {
	s := New(paths(1, 1), nil)
	now := time.Unix(0, 0)
	for range 10 {
		if s.Pick(now, all{}, 0) != 1 {
			t.Fatal("avoided path picked")
		}
	}
	if s.Pick(now, only{0: true}, 0) != 0 {
		t.Fatal("avoid must fall back when nothing else can send")
	}
	for range DefaultRetireAfter {
		s.OnTimeout(1, now)
	}
	ps := paths(1, 1, 1)
	s2 := New(ps, s)
	if !s2.Retired(1) || s2.Len() != 3 {
		t.Fatal("state not carried across swap")
	}
}
