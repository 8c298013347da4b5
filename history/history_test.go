package history

import (
	"errors"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/multiplane/multiplane/planes"
)

// health is a planes.Health whose answers the test sets.
type health struct {
	plane planes.PlaneHealth
	link  planes.LinkHealth
}

func (h *health) PlaneHealth(string) (planes.PlaneHealth, bool) { return h.plane, true }
func (h *health) SwitchHealth(string) (planes.SwitchHealth, bool) {
	return planes.SwitchHealth{}, false
}
func (h *health) LinkHealth(string) (planes.LinkHealth, bool) { return h.link, true }

func topology(links int) (*planes.Topology, []planes.Link) {
	t := &planes.Topology{Planes: []planes.Plane{{Name: "p0"}, {Name: "p1"}}}
	var ls []planes.Link
	for i := range links {
		ls = append(ls, planes.Link{Name: fmt.Sprintf("s0:E%d", i), Plane: "p0"})
	}
	return t, ls
}

func TestSeriesFineThenCoarse(t *testing.T) {
	h := &health{}
	r := New(Config{Fine: 2 * time.Minute, Coarse: time.Hour, CoarseStep: time.Minute, MaxLinks: 10}, h)
	now := time.Unix(1_800_000_000, 0) // on a minute
	r.now = func() time.Time { return now }
	r.SetTopology(topology(2))
	// 3 minutes at 1 s: utilisation rises 0.0, 0.01, ...; the plane is
	// down for one second of the second minute.
	start := now
	for i := range 180 {
		h.plane = planes.PlaneHealth{State: planes.PlaneHealthy, Utilization: float64(i) / 100, CapacityRatio: 1}
		if i == 90 {
			h.plane.State = planes.PlaneDown
		}
		h.link = planes.LinkHealth{State: planes.LinkUp, Rates: &planes.InterfaceRates{OutOctets: 1e6, OutPkts: 100, ECNMarked: 10}}
		r.Sample()
		now = now.Add(time.Second)
	}
	// The last 30 s, at 1 s.
	c, err := r.Plane("p0", now.Add(-30*time.Second), false)
	if err != nil || c.StepSeconds != 1 || len(c.T) != 30 || c.T[0] != now.Add(-30*time.Second).Unix() || c.Utilization[29] != 1.79 {
		t.Fatalf("fine: step %d, %d points, first %v, last util %v, %v", c.StepSeconds, len(c.T), c.T, c.Utilization, err)
	}
	// Older than the fine window: per minute, averaged, worst state; the
	// minute still being filled is not in it yet.
	c, err = r.Plane("p0", start, false)
	if err != nil || c.StepSeconds != 60 || len(c.T) != 2 {
		t.Fatalf("coarse: step %d, %d points, %v", c.StepSeconds, len(c.T), err)
	}
	if c.T[0] != start.Unix() || c.State[0] != "healthy" || c.State[1] != "down" || abs(c.Utilization[0]-0.295) > 1e-4 || abs(c.Utilization[1]-0.895) > 1e-4 {
		t.Fatalf("coarse minutes: t %v, states %v, util %v", c.T, c.State, c.Utilization)
	}
	// The fine window holds 2 minutes of the 3 recorded.
	if c, _ := r.Plane("p0", now.Add(-2*time.Minute), false); c.StepSeconds != 1 || len(c.T) != 120 || c.T[0] != start.Add(time.Minute).Unix() {
		t.Fatalf("the whole fine window: step %d, %d points from %d", c.StepSeconds, len(c.T), c.T[0])
	}
	l, err := r.Link("s0:E1", now.Add(-5*time.Second), false)
	if err != nil || len(l.T) != 5 || l.TrafficBps[0] != 8e6 || l.ECNRate[0] != 0.1 || l.State[0] != "up" || l.Utilization != nil {
		t.Fatalf("link: %+v %v", l, err)
	}
	if _, err := r.Plane("p9", start, false); !errors.Is(err, ErrUnknown) {
		t.Fatalf("unknown plane: %v", err)
	}
}

func TestLinksOverTheLimitAreNotRecorded(t *testing.T) {
	r := New(Config{MaxLinks: 3}, &health{})
	r.SetTopology(topology(4))
	r.Sample()
	if _, err := r.Link("s0:E0", time.Now().Add(-time.Minute), false); !errors.Is(err, ErrNotRecorded) {
		t.Fatalf("link over the limit: %v", err)
	}
	if _, err := r.Plane("p1", time.Now().Add(-time.Minute), false); err != nil {
		t.Fatalf("planes are always recorded: %v", err)
	}
	// Back under the limit: recorded again.
	r.SetTopology(topology(3))
	if _, err := r.Link("s0:E0", time.Now().Add(-time.Minute), false); err != nil {
		t.Fatal(err)
	}
}

func abs(f float32) float32 {
	if f < 0 {
		return -f
	}
	return f
}

func TestPointIs24Bytes(t *testing.T) {
	if n := unsafe.Sizeof(point{}); n != 24 {
		t.Fatalf("point is %d bytes; Config.MaxLinks's memory figures assume 24", n)
	}
}
