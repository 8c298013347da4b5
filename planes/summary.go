package planes

// Health tells the live state of planes, switches and links; the Engine
// implements it. ok is false for a name it does not know.
type Health interface {
	PlaneHealth(plane string) (h PlaneHealth, ok bool)
	SwitchHealth(sw string) (h SwitchHealth, ok bool)
	LinkHealth(link string) (h LinkHealth, ok bool)
}

// HealthSnapshot is the health of every plane, switch and link at one
// instant (Engine.Snapshot); it does not change.
type HealthSnapshot struct {
	Planes   map[string]PlaneHealth
	Switches map[string]SwitchHealth
	// Links are the links that are not up; a link of known missing from
	// it is up.
	Links map[string]LinkHealth
	// known indexes every link by name: only its keys are read (its
	// values are the engine's live state).
	known map[string]*linkHealth
}

// PlaneHealth implements Health.
func (s *HealthSnapshot) PlaneHealth(name string) (PlaneHealth, bool) {
	h, ok := s.Planes[name]
	return h, ok
}

// SwitchHealth implements Health.
func (s *HealthSnapshot) SwitchHealth(name string) (SwitchHealth, bool) {
	h, ok := s.Switches[name]
	return h, ok
}

// LinkHealth implements Health.
func (s *HealthSnapshot) LinkHealth(name string) (LinkHealth, bool) {
	if h, ok := s.Links[name]; ok {
		return h, true
	}
	if _, ok := s.known[name]; ok {
		return LinkHealth{State: LinkUp}, true
	}
	return LinkHealth{}, false
}

// Snapshot returns h as of one instant: h's own Snapshot when it has one
// (a live Engine), else h (nil stays nil).
func Snapshot(h Health) Health {
	if s, ok := h.(interface{ Snapshot() *HealthSnapshot }); ok {
		return s.Snapshot()
	}
	return h
}

// PlaneSummary is a plane with what it holds and its live health.
type PlaneSummary struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Switches    int    `json:"switches"`
	Endpoints   int    `json:"endpoints"`
	Links       int    `json:"links"`
	PlaneHealth
}

// SwitchStatus is a switch with its live health.
type SwitchStatus struct {
	Switch
	SwitchHealth
}

// LinkStatus is a link with its live health.
type LinkStatus struct {
	Link
	LinkHealth
}

// PlaneSummaries summarizes every plane of t, in declaration order.
func (t *Topology) PlaneSummaries(links []Link, h Health) []PlaneSummary {
	idx := map[string]int{}
	out := make([]PlaneSummary, len(t.Planes))
	for i, p := range t.Planes {
		idx[p.Name] = i
		ph, ok := h.PlaneHealth(p.Name)
		if !ok {
			ph = PlaneHealth{State: PlaneHealthy, CapacityRatio: 1}
		}
		out[i] = PlaneSummary{Name: p.Name, Description: p.Description, PlaneHealth: ph}
	}
	for _, s := range t.Switches {
		out[idx[s.Plane]].Switches++
	}
	for _, l := range links {
		out[idx[l.Plane]].Links++
	}
	for _, e := range t.Endpoints {
		for _, p := range e.Ports {
			out[idx[p.Plane]].Endpoints++
		}
	}
	return out
}

// SwitchStatusOf returns a switch with its health (healthy and reachable
// when h does not know it yet).
func SwitchStatusOf(s Switch, h Health) SwitchStatus {
	sh, ok := h.SwitchHealth(s.Name)
	if !ok {
		sh = SwitchHealth{State: PlaneHealthy, Reachable: true}
	}
	return SwitchStatus{Switch: s, SwitchHealth: sh}
}

// LinkStatusOf returns a link with its health (up when h does not know it).
func LinkStatusOf(l Link, h Health) LinkStatus {
	lh, ok := h.LinkHealth(l.Name)
	if !ok {
		lh = LinkHealth{State: LinkUp}
	}
	return LinkStatus{Link: l, LinkHealth: lh}
}
