package planes

import (
	"math"
	"time"
)

// Switches collected by another fabricd replica (package shard) are
// "remote" here: the engine does not judge them from telemetry but takes
// their judged state from the owner's SwitchView. Telemetry of a remote
// switch (a stream started before a handover) is kept, unjudged, so the
// engine judges it at once when the switch becomes local.

// SwitchView is a switch's state as the engine of the replica collecting
// it judged it.
type SwitchView struct {
	Switch     string              `json:"switch"`
	Reachable  bool                `json:"reachable"`
	Synced     bool                `json:"synced"`
	Reason     string              `json:"reason,omitempty"`
	LastUpdate time.Time           `json:"last_update,omitzero"`
	Links      []LinkView          `json:"links"`
	Traffic    map[string]RateSums `json:"traffic,omitempty"` // by plane
}

// LinkView is one link in a SwitchView (its last update is the switch's).
type LinkView struct {
	Interface  string     `json:"interface"`
	State      LinkState  `json:"state"`
	Reason     string     `json:"reason,omitempty"`
	Oper       OperStatus `json:"oper_status,omitempty"`
	Suppressed bool       `json:"suppressed,omitempty"`
}

// RateSums are the per-second rates of a set of links, summed: what a
// plane's traffic figures are made of.
type RateSums struct {
	TrafficBps float64 `json:"traffic_bps"`
	Pkts       float64 `json:"pkts"`
	Lost       float64 `json:"lost_pkts"`
	OutPkts    float64 `json:"out_pkts"`
	Marked     float64 `json:"ecn_marked_pkts"`
}

func (s *RateSums) add(r *InterfaceRates) {
	s.TrafficBps += math.Max(r.InOctets, r.OutOctets) * 8
	s.Pkts += r.InPkts + r.OutPkts
	s.Lost += r.InErrors + r.InDiscards + r.OutDiscards + r.QueueDrops
	s.OutPkts += r.OutPkts
	s.Marked += r.ECNMarked
}

func (s *RateSums) plus(o RateSums) {
	s.TrafficBps += o.TrafficBps
	s.Pkts += o.Pkts
	s.Lost += o.Lost
	s.OutPkts += o.OutPkts
	s.Marked += o.Marked
}

// SetOwners sets which replica collects each switch (package shard):
// switches owned by another than self, or by none, are remote. A switch
// that becomes local is judged at once from the telemetry kept while it
// was remote; one that becomes remote keeps its state until ImportSwitch.
func (e *Engine) SetOwners(self string, owners map[string]string) {
	e.mu.Lock()
	now := e.clock.Now()
	touched := map[*linkHealth]struct{}{}
	var local []*switchHealth
	for name, sh := range e.switches {
		sh.owner = owners[name]
		r := sh.owner != self
		if sh.remote == r {
			continue
		}
		sh.remote = r
		if r {
			for _, lh := range sh.links {
				delete(e.pending, lh)
			}
			continue
		}
		// Synced again only once this replica's own stream says so.
		sh.traffic, sh.synced = nil, false
		local = append(local, sh)
		for _, lh := range sh.links {
			touched[lh] = struct{}{}
		}
	}
	events := e.settle(touched, now, nil)
	for _, sh := range local {
		events = e.aggregateSwitch(sh, now, events)
	}
	e.mu.Unlock()
	e.bus.Publish(events...)
}

// ImportSwitch takes a remote switch's state from the view of the replica
// that collects it; it reports false, changing nothing, for a switch that
// is not remote or not in the topology. Links the view does not name keep
// their state.
func (e *Engine) ImportSwitch(v SwitchView) bool {
	e.mu.Lock()
	sh := e.switches[v.Switch]
	if sh == nil || !sh.remote {
		e.mu.Unlock()
		return false
	}
	now := e.clock.Now()
	sh.reachable, sh.synced, sh.reason, sh.lastUpdate = v.Reachable, v.Synced, v.Reason, v.LastUpdate
	sh.traffic = v.Traffic
	byIface := make(map[string]*linkHealth, len(sh.links))
	for _, lh := range sh.links {
		byIface[lh.link.Interface] = lh
	}
	var events []Event
	changedPl := map[*planeHealth]bool{}
	for _, lv := range v.Links {
		lh := byIface[lv.Interface]
		if lh == nil || !ValidLinkState(string(lv.State)) {
			continue
		}
		lh.reason, lh.suppressed, lh.lastUpdate = lv.Reason, lv.Suppressed, v.LastUpdate
		if lv.Oper != "" {
			lh.oper = lv.Oper
		}
		lh.degraded = lv.State == LinkDegraded
		if lv.State == lh.state {
			continue
		}
		events = append(events, Event{At: now, SubjectKind: SubjectLink, Subject: lh.link.Name, Kind: EventStateChange,
			From: string(lh.state), To: string(lv.State), Reason: lv.Reason,
			Evidence: map[string]any{"switch": lh.link.Switch, "interface": lh.link.Interface, "judged_by": "owner replica"}})
		count(lh, -1)
		lh.state, lh.changedAt = lv.State, now
		count(lh, 1)
		changedPl[lh.plane] = true
	}
	events = e.aggregateSwitch(sh, now, events)
	for ph := range changedPl {
		events = e.aggregatePlane(ph, now, "link states changed", events)
	}
	e.mu.Unlock()
	e.bus.Publish(events...)
	return true
}

// ExportSwitch returns a switch's state as this engine judges it, for the
// replicas that do not collect it.
func (e *Engine) ExportSwitch(name string) (SwitchView, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	sh := e.switches[name]
	if sh == nil {
		return SwitchView{}, false
	}
	v := SwitchView{Switch: name, Reachable: sh.reachable, Synced: sh.synced, Reason: sh.reason,
		LastUpdate: sh.lastUpdate, Links: make([]LinkView, 0, len(sh.links))}
	for _, lh := range sh.links {
		v.Links = append(v.Links, LinkView{Interface: lh.link.Interface, State: lh.state, Reason: lh.reason,
			Oper: lh.oper, Suppressed: lh.suppressed})
		if lh.rates != nil {
			if v.Traffic == nil {
				v.Traffic = map[string]RateSums{}
			}
			s := v.Traffic[lh.link.Plane]
			s.add(lh.rates)
			v.Traffic[lh.link.Plane] = s
		}
	}
	return v, true
}

// States returns the current state of every plane, switch and link as
// state-change events without From or time (for the history writer's
// catch-up, events.Writer.States).
func (e *Engine) States() []Event {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make([]Event, 0, len(e.planes)+len(e.switches)+len(e.byName))
	for name, ph := range e.planes {
		out = append(out, Event{SubjectKind: SubjectPlane, Subject: name, Kind: EventStateChange, To: string(ph.state), Reason: ph.health.Reason})
	}
	for name, sh := range e.switches {
		out = append(out, Event{SubjectKind: SubjectSwitch, Subject: name, Kind: EventStateChange, To: string(sh.state), Reason: sh.reason})
	}
	for name, lh := range e.byName {
		out = append(out, Event{SubjectKind: SubjectLink, Subject: name, Kind: EventStateChange, To: string(lh.state), Reason: lh.reason})
	}
	return out
}
