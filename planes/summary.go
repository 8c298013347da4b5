package planes

// Health tells the current state of planes and links. Until telemetry
// feeds it, StaticHealth reports everything healthy.
type Health interface {
	PlaneState(plane string) PlaneState
	LinkState(link string) LinkState
}

// StaticHealth is a Health where every plane is healthy and every link up.
type StaticHealth struct{}

// PlaneState implements Health.
func (StaticHealth) PlaneState(string) PlaneState { return PlaneHealthy }

// LinkState implements Health.
func (StaticHealth) LinkState(string) LinkState { return LinkUp }

// PlaneSummary is a plane with its state and what it holds.
type PlaneSummary struct {
	Name        string     `json:"name"`
	Description string     `json:"description,omitempty"`
	State       PlaneState `json:"state"`
	Switches    int        `json:"switches"`
	Endpoints   int        `json:"endpoints"`
	Links       int        `json:"links"`
	LinksUp     int        `json:"links_up"`
	CapacityBps int64      `json:"capacity_bps"`
}

// LinkStatus is a link with its state.
type LinkStatus struct {
	Link
	State LinkState `json:"state"`
}

// PlaneSummaries summarizes every plane of t in declaration order.
func (t *Topology) PlaneSummaries(links []Link, h Health) []PlaneSummary {
	idx := map[string]int{}
	out := make([]PlaneSummary, len(t.Planes))
	for i, p := range t.Planes {
		idx[p.Name] = i
		out[i] = PlaneSummary{Name: p.Name, Description: p.Description, State: h.PlaneState(p.Name)}
	}
	for _, s := range t.Switches {
		out[idx[s.Plane]].Switches++
	}
	for _, l := range links {
		ps := &out[idx[l.Plane]]
		ps.Links++
		if h.LinkState(l.Name) == LinkUp {
			ps.LinksUp++
			ps.CapacityBps += l.SpeedBps
		}
	}
	for _, e := range t.Endpoints {
		for _, p := range e.Ports {
			out[idx[p.Plane]].Endpoints++
		}
	}
	return out
}
