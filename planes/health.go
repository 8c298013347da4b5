package planes

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Clock tells the engine the time; tests inject a manual one.
type Clock interface{ Now() time.Time }

// SystemClock is the wall clock.
type SystemClock struct{}

// Now implements Clock.
func (SystemClock) Now() time.Time { return time.Now() }

// PlaneHealth is a plane's live health.
type PlaneHealth struct {
	State         PlaneState `json:"state"`
	CapacityBps   int64      `json:"capacity_bps"`   // links up or degraded
	TotalBps      int64      `json:"total_bps"`      // all links
	CapacityRatio float64    `json:"capacity_ratio"` // remaining fraction
	Utilization   float64    `json:"utilization"`    // traffic / remaining capacity
	LossRate      float64    `json:"loss_rate"`      // discards+errors per packet
	ECNRate       float64    `json:"ecn_rate"`       // marked per output packet
	LinksUp       int        `json:"links_up"`       //
	LinksDegraded int        `json:"links_degraded"` //
	LinksDown     int        `json:"links_down"`     //
	Drained       bool       `json:"drained"`        // an operator drain is on
	Reason        string     `json:"reason,omitempty"`
}

// SwitchHealth is a switch's live health.
type SwitchHealth struct {
	State      PlaneState `json:"state"` // healthy, degraded or down
	Reachable  bool       `json:"reachable"`
	Synced     bool       `json:"synced"`
	LastUpdate time.Time  `json:"last_update,omitzero"`
	Reason     string     `json:"reason,omitempty"`
	// CollectedBy is the fabricd replica that streams the switch's
	// telemetry when replicas share the switches (package shard).
	CollectedBy string `json:"collected_by,omitempty"`
}

// LinkHealth is a link's live health.
type LinkHealth struct {
	State      LinkState       `json:"state"`
	Reason     string          `json:"reason,omitempty"`
	Oper       OperStatus      `json:"oper_status,omitempty"`
	Suppressed bool            `json:"suppressed,omitempty"` // held down by flap damping
	Rates      *InterfaceRates `json:"rates,omitempty"`
	LastUpdate time.Time       `json:"last_update,omitzero"`
	// Evidence is the endpoint's own evidence of the link, which judges
	// it while its switch is unreachable.
	Evidence *LinkEvidence `json:"endpoint_evidence,omitempty"`
}

type linkKey struct{ sw, iface string }

type linkHealth struct {
	link   Link
	sw     *switchHealth
	plane  *planeHealth
	state  LinkState
	reason string

	oper       OperStatus
	operAt     time.Time // target timestamp of the last oper-status
	upSince    time.Time // engine time oper-status became UP while down
	rates      *InterfaceRates
	lastUpdate time.Time

	degraded    bool
	degradeWhy  string
	overCount   int
	underSince  time.Time
	penalty     float64
	penaltyAt   time.Time
	suppressed  bool
	pendingFrom time.Time    // sample time of the change being judged, for latency
	changedAt   time.Time    // engine time of the last transition
	evidence    LinkEvidence // from the endpoint (State "": none)
	evidenceAt  time.Time    // engine time evidence.State was first seen
}

type switchHealth struct {
	name             string
	down, degraded   int // links in each state, kept as links change
	state            PlaneState
	reachable        bool
	synced           bool
	unreachableSince time.Time
	lastUpdate       time.Time
	reason           string
	links            []*linkHealth
	owner            string              // the replica collecting it ("": unshared)
	remote           bool                // collected by another replica (remote.go)
	traffic          map[string]RateSums // a remote switch's, by plane
}

type planeHealth struct {
	name    string
	state   PlaneState
	drained bool
	links   []*linkHealth
	health  PlaneHealth // counts and capacity, kept as links change
	upW     float64     // weight (speed, or 1 when unknown) of links not down
	totalW  float64
}

// linkWeight is a link's share of its plane's capacity.
func linkWeight(lh *linkHealth) float64 {
	if lh.link.SpeedBps > 0 {
		return float64(lh.link.SpeedBps)
	}
	return 1
}

// count adds (sign 1) or removes (sign -1) a link in its state to the
// counters of its plane and switch.
func count(lh *linkHealth, sign int) {
	ph, sh, w := lh.plane, lh.sw, linkWeight(lh)
	ph.totalW += float64(sign) * w
	ph.health.TotalBps += int64(sign) * lh.link.SpeedBps
	switch lh.state {
	case LinkUp:
		ph.health.LinksUp += sign
	case LinkDegraded:
		ph.health.LinksDegraded += sign
		sh.degraded += sign
	case LinkDown:
		ph.health.LinksDown += sign
		sh.down += sign
	}
	if lh.state != LinkDown {
		ph.upW += float64(sign) * w
		ph.health.CapacityBps += int64(sign) * lh.link.SpeedBps
	}
}

// recount rebuilds every counter from the links.
func (e *Engine) recount() {
	for _, ph := range e.planes {
		ph.upW, ph.totalW = 0, 0
		ph.health = PlaneHealth{}
	}
	for _, sh := range e.switches {
		sh.down, sh.degraded = 0, 0
	}
	for _, lh := range e.links {
		count(lh, 1)
	}
}

// Engine turns telemetry into link, switch and plane states with
// thresholds, hysteresis and flap damping. Every transition is published on
// the bus as an Event. It implements Observer (telemetry in) and Health
// (state out). Call Tick regularly (Run does) so hold times expire.
type Engine struct {
	cfg    HealthConfig
	clock  Clock
	bus    *Bus
	logger *slog.Logger
	// OnDetect, if set, is called with the time from a sample's timestamp
	// at the switch to the plane state change it caused.
	OnDetect func(time.Duration)

	// planeDowns counts planes' transitions to down (PlaneDowns).
	planeDowns atomic.Uint64

	mu       sync.RWMutex
	links    map[linkKey]*linkHealth
	byName   map[string]*linkHealth
	switches map[string]*switchHealth
	planes   map[string]*planeHealth
	pending  map[*linkHealth]struct{} // links with a timer running
}

// NewEngine returns an engine with no topology.
func NewEngine(cfg HealthConfig, clock Clock, bus *Bus, logger *slog.Logger) *Engine {
	if clock == nil {
		clock = SystemClock{}
	}
	if bus == nil {
		bus = NewBus()
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Engine{cfg: cfg, clock: clock, bus: bus, logger: logger,
		links: map[linkKey]*linkHealth{}, byName: map[string]*linkHealth{},
		switches: map[string]*switchHealth{}, planes: map[string]*planeHealth{}, pending: map[*linkHealth]struct{}{}}
}

// SetTopology (re)builds the model from a topology, keeping the state of
// links, switches and planes that remain.
func (e *Engine) SetTopology(t *Topology, links []Link) {
	e.mu.Lock()
	defer e.mu.Unlock()
	planes := map[string]*planeHealth{}
	for _, p := range t.Planes {
		ph := e.planes[p.Name]
		if ph == nil {
			ph = &planeHealth{name: p.Name, state: PlaneHealthy}
		}
		ph.links = nil
		planes[p.Name] = ph
	}
	switches := map[string]*switchHealth{}
	for _, s := range t.Switches {
		sh := e.switches[s.Name]
		if sh == nil {
			sh = &switchHealth{name: s.Name, state: PlaneHealthy, reachable: true}
		}
		sh.links = nil
		switches[s.Name] = sh
	}
	newLinks := map[linkKey]*linkHealth{}
	byName := map[string]*linkHealth{}
	for _, l := range links {
		k := linkKey{l.Switch, l.Interface}
		lh := e.links[k]
		if lh == nil {
			lh = &linkHealth{state: LinkUp}
		}
		lh.link, lh.sw, lh.plane = l, switches[l.Switch], planes[l.Plane]
		newLinks[k], byName[l.Name] = lh, lh
		lh.sw.links = append(lh.sw.links, lh)
		lh.plane.links = append(lh.plane.links, lh)
	}
	e.links, e.byName, e.switches, e.planes = newLinks, byName, switches, planes
	e.recount()
	for lh := range e.pending {
		if newLinks[linkKey{lh.link.Switch, lh.link.Interface}] != lh {
			delete(e.pending, lh)
		}
	}
	now := e.clock.Now()
	var events []Event
	for _, sh := range switches {
		events = e.aggregateSwitch(sh, now, events)
	}
	for _, ph := range planes {
		events = e.aggregatePlane(ph, now, "topology changed", events)
	}
	e.bus.Publish(events...)
}

// Restore sets states remembered from before a restart (the last event of
// each subject), so a restart neither repeats nor loses transitions.
func (e *Engine) Restore(last []Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range last {
		switch ev.SubjectKind {
		case SubjectLink:
			if lh := e.byName[ev.Subject]; lh != nil && ValidLinkState(ev.To) {
				lh.state, lh.reason = LinkState(ev.To), ev.Reason
				lh.degraded = lh.state == LinkDegraded
				if lh.state == LinkDown {
					lh.oper = "" // needs a fresh UP to recover
				}
			}
		case SubjectSwitch:
			if sh := e.switches[ev.Subject]; sh != nil && ValidPlaneState(ev.To) {
				sh.state, sh.reason = PlaneState(ev.To), ev.Reason
			}
		case SubjectPlane:
			if ph := e.planes[ev.Subject]; ph != nil && ValidPlaneState(ev.To) {
				ph.state = PlaneState(ev.To)
			}
		}
	}
	e.recount()
	for _, ph := range e.planes {
		e.computePlane(ph)
	}
}

// SetDrained marks planes an operator drains (state draining).
func (e *Engine) SetDrained(planes map[string]bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.clock.Now()
	var events []Event
	for name, ph := range e.planes {
		if ph.drained != planes[name] {
			ph.drained = planes[name]
			events = e.aggregatePlane(ph, now, "operator drain changed", events)
		}
	}
	e.bus.Publish(events...)
}

// ObserveInterfaces implements Observer.
func (e *Engine) ObserveInterfaces(batch []InterfaceSample) {
	e.mu.Lock()
	now := e.clock.Now()
	var events []Event
	touched := map[*linkHealth]struct{}{}
	for i := range batch {
		s := &batch[i]
		lh := e.links[linkKey{s.Switch, s.Interface}]
		if lh == nil {
			continue
		}
		lh.lastUpdate = now
		if !lh.sw.remote {
			lh.sw.lastUpdate = now
		}
		if s.Oper != "" && !s.At.Before(lh.operAt) {
			if s.Oper == OperUp && lh.oper != OperUp {
				lh.upSince = now
			}
			if s.Oper != lh.oper {
				lh.pendingFrom = s.At
			}
			lh.oper, lh.operAt = s.Oper, s.At
		}
		if s.Rates != nil {
			r := *s.Rates
			lh.rates = &r
			e.judgeRates(lh, now)
		}
		if !lh.sw.remote {
			touched[lh] = struct{}{}
		}
	}
	events = e.settle(touched, now, events)
	e.mu.Unlock()
	e.bus.Publish(events...)
}

// ObserveSwitch implements Observer.
func (e *Engine) ObserveSwitch(r SwitchReachability) {
	e.mu.Lock()
	sh := e.switches[r.Switch]
	if sh == nil || sh.remote {
		e.mu.Unlock()
		return
	}
	now := e.clock.Now()
	var events []Event
	if sh.reachable != r.Reachable {
		sh.reachable = r.Reachable
		sh.reason = r.Reason
		if r.Reachable {
			sh.unreachableSince = time.Time{}
		} else {
			sh.unreachableSince = now
		}
	}
	sh.synced = r.Synced
	touched := map[*linkHealth]struct{}{}
	for _, lh := range sh.links {
		touched[lh] = struct{}{}
	}
	events = e.settle(touched, now, events)
	events = e.aggregateSwitch(sh, now, events)
	e.mu.Unlock()
	e.bus.Publish(events...)
}

// ObserveEvidence replaces the endpoints' evidence of the links, by link
// name (links not in ev have none). Links of unreachable switches are
// judged by it at once.
func (e *Engine) ObserveEvidence(ev map[string]LinkEvidence) {
	e.mu.Lock()
	now := e.clock.Now()
	touched := map[*linkHealth]struct{}{}
	for name, lh := range e.byName {
		e.setEvidence(lh, ev[name], now, touched)
	}
	events := e.settle(touched, now, nil)
	e.mu.Unlock()
	e.bus.Publish(events...)
}

// ChangeEvidence sets the evidence of the links in changes only, by link
// name (a zero LinkEvidence: none); it costs what changed, not the
// fabric's size.
func (e *Engine) ChangeEvidence(changes map[string]LinkEvidence) {
	e.mu.Lock()
	now := e.clock.Now()
	touched := map[*linkHealth]struct{}{}
	for name, ev := range changes {
		if lh, ok := e.byName[name]; ok {
			e.setEvidence(lh, ev, now, touched)
		}
	}
	events := e.settle(touched, now, nil)
	e.mu.Unlock()
	e.bus.Publish(events...)
}

// setEvidence gives lh its evidence, adding it to touched when that
// judges it (its switch unreachable). e.mu held.
func (e *Engine) setEvidence(lh *linkHealth, next LinkEvidence, now time.Time, touched map[*linkHealth]struct{}) {
	if next.State != LinkUp && next.State != LinkDown {
		next = LinkEvidence{}
	}
	if next.State == lh.evidence.State && next.Reason == lh.evidence.Reason {
		return
	}
	if next.State != lh.evidence.State {
		lh.evidenceAt = now
	}
	lh.evidence = next
	if !lh.sw.reachable && !lh.sw.remote {
		touched[lh] = struct{}{}
	}
}

// Tick lets hold times expire; Run calls it every interval.
func (e *Engine) Tick() {
	e.mu.Lock()
	now := e.clock.Now()
	touched := map[*linkHealth]struct{}{}
	for lh := range e.pending {
		touched[lh] = struct{}{}
	}
	for _, sh := range e.switches {
		if !sh.reachable && !sh.remote {
			for _, lh := range sh.links {
				touched[lh] = struct{}{}
			}
		}
	}
	events := e.settle(touched, now, nil)
	e.mu.Unlock()
	e.bus.Publish(events...)
}

// judgeRates updates a link's degradation with hysteresis.
func (e *Engine) judgeRates(lh *linkHealth, now time.Time) {
	r := lh.rates
	over, under, why := false, true, ""
	check := func(name string, v, limit float64) {
		if limit <= 0 {
			return
		}
		if v > limit {
			over, why = true, fmt.Sprintf("%s %.3g over %.3g", name, v, limit)
		}
		if v >= limit*e.cfg.ClearFactor {
			under = false
		}
	}
	if r.InPkts+r.OutPkts >= e.cfg.MinPktsPerSec {
		check("error ratio", ratio(r.InErrors+r.InFCSErrors, r.InPkts), e.cfg.ErrorRatio)
		check("discard ratio", ratio(r.InDiscards+r.OutDiscards+r.QueueDrops, r.InPkts+r.OutPkts), e.cfg.DiscardRatio)
		check("ECN ratio", ratio(r.ECNMarked, r.OutPkts), e.cfg.ECNRatio)
	}
	if lh.link.SpeedBps > 0 {
		check("utilization", math.Max(r.InOctets, r.OutOctets)*8/float64(lh.link.SpeedBps), e.cfg.Utilization)
	}
	switch {
	case over:
		lh.underSince = time.Time{}
		lh.overCount++
		if lh.overCount >= max(e.cfg.DegradeSamples, 1) {
			lh.degraded, lh.degradeWhy = true, why
		}
	case lh.degraded && under:
		lh.overCount = 0
		if lh.underSince.IsZero() {
			lh.underSince = now
		}
	default:
		lh.overCount = 0
		if !under {
			lh.underSince = time.Time{}
		}
	}
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// decayedPenalty is the flap penalty at now.
func (e *Engine) decayedPenalty(lh *linkHealth, now time.Time) float64 {
	if lh.penalty == 0 || e.cfg.FlapHalfLife <= 0 {
		return lh.penalty
	}
	return lh.penalty * math.Exp2(-now.Sub(lh.penaltyAt).Seconds()/e.cfg.FlapHalfLife.Seconds())
}

// desired is the state a link should be in now, and whether a timer is
// still running for it.
func (e *Engine) desired(lh *linkHealth, now time.Time) (LinkState, string, bool) {
	sw := lh.sw
	if !sw.reachable {
		why := "switch unreachable; endpoint evidence: " + lh.evidence.Reason
		switch {
		case lh.evidence.State == LinkDown:
			lh.oper = "" // a fresh UP is needed once the switch is back
			return LinkDown, why, false
		case lh.evidence.State == LinkUp && lh.state != LinkDown:
			return LinkUp, why, false
		case lh.evidence.State == LinkUp && lh.evidenceAt.After(lh.changedAt):
			// Up again on evidence seen since the link went down (older
			// evidence may predate the failure): after the up hold, and
			// not while flap damping holds the link down.
			if st, why, waiting := e.recovery(lh, lh.evidenceAt, now); waiting {
				return st, why, true
			}
			return LinkUp, why, false
		}
		if now.Sub(sw.unreachableSince) >= e.cfg.UnreachableHold {
			lh.oper = "" // a fresh UP is needed once the switch is back
			return LinkDown, "switch unreachable for " + now.Sub(sw.unreachableSince).Round(time.Second).String() + ": " + sw.reason, false
		}
		return lh.state, lh.reason, true // hold: judge nothing new
	}
	if lh.oper != "" && lh.oper != OperUp {
		return LinkDown, "oper-status " + string(lh.oper), false
	}
	if lh.state == LinkDown {
		if lh.oper != OperUp {
			return LinkDown, lh.reason, false
		}
		if st, why, waiting := e.recovery(lh, lh.upSince, now); waiting {
			return st, why, true
		}
	}
	if lh.degraded && !lh.underSince.IsZero() && now.Sub(lh.underSince) >= e.cfg.ClearHold {
		lh.degraded, lh.underSince = false, time.Time{}
	}
	if lh.degraded {
		return LinkDegraded, lh.degradeWhy, !lh.underSince.IsZero()
	}
	return LinkUp, "", false
}

// recovery tells whether a down link that has looked up since upSince
// must still wait: while flap damping suppresses it, or for the up hold.
func (e *Engine) recovery(lh *linkHealth, upSince, now time.Time) (LinkState, string, bool) {
	if e.cfg.FlapDamping && lh.suppressed {
		if e.decayedPenalty(lh, now) > e.cfg.FlapReuse {
			return LinkDown, "flap damping: suppressed", true
		}
		lh.suppressed = false
	}
	if now.Sub(upSince) < e.cfg.UpHold {
		return LinkDown, lh.reason, true
	}
	return LinkUp, "", false
}

// settle moves touched links to their desired state and re-aggregates
// what changed.
func (e *Engine) settle(touched map[*linkHealth]struct{}, now time.Time, events []Event) []Event {
	changedSw := map[*switchHealth]struct{}{}
	changedPl := map[*planeHealth]time.Time{}
	for lh := range touched {
		st, why, waiting := e.desired(lh, now)
		if waiting {
			e.pending[lh] = struct{}{}
		} else {
			delete(e.pending, lh)
		}
		if st == lh.state {
			lh.reason = why // what holds it there now (no transition)
			continue
		}
		if st == LinkDown && e.cfg.FlapDamping {
			lh.penalty = e.decayedPenalty(lh, now) + e.cfg.FlapPenalty
			lh.penaltyAt = now
			if lh.penalty > e.cfg.FlapSuppress {
				lh.suppressed = true
			}
		}
		events = append(events, Event{At: now, SubjectKind: SubjectLink, Subject: lh.link.Name, Kind: EventStateChange,
			From: string(lh.state), To: string(st), Reason: why, Evidence: linkEvidence(lh)})
		count(lh, -1)
		lh.state, lh.reason, lh.changedAt = st, why, now
		count(lh, 1)
		changedSw[lh.sw] = struct{}{}
		// Detection latency is timed from the oper-status change that took
		// a link down; recoveries wait out hold times by design.
		from, ok := changedPl[lh.plane]
		if st == LinkDown && !lh.pendingFrom.IsZero() && (from.IsZero() || lh.pendingFrom.Before(from)) {
			from = lh.pendingFrom
		}
		if !ok || !from.IsZero() {
			changedPl[lh.plane] = from
		}
	}
	for sh := range changedSw {
		events = e.aggregateSwitch(sh, now, events)
	}
	for ph, from := range changedPl {
		before := ph.state
		events = e.aggregatePlane(ph, now, "link states changed", events)
		if ph.state != before && !from.IsZero() && e.OnDetect != nil {
			e.OnDetect(time.Since(from))
		}
	}
	return events
}

func linkEvidence(lh *linkHealth) map[string]any {
	ev := map[string]any{"switch": lh.link.Switch, "interface": lh.link.Interface}
	if lh.oper != "" {
		ev["oper_status"] = string(lh.oper)
	}
	if !lh.operAt.IsZero() {
		ev["oper_at"] = lh.operAt
	}
	if lh.rates != nil {
		ev["rates"] = lh.rates
	}
	if lh.suppressed {
		ev["flap_penalty"] = math.Round(lh.penalty)
	}
	if !lh.sw.reachable && lh.evidence.State != "" {
		ev["endpoint_evidence"] = lh.evidence
	}
	return ev
}

func (e *Engine) aggregateSwitch(sh *switchHealth, now time.Time, events []Event) []Event {
	st, why := PlaneHealthy, ""
	switch {
	case len(sh.links) > 0 && sh.down == len(sh.links):
		st, why = PlaneDown, "all links down"
	case !sh.reachable:
		st, why = PlaneDegraded, "telemetry stream down: "+sh.reason
	case sh.down+sh.degraded > 0:
		st, why = PlaneDegraded, "some links down or degraded"
	}
	if st != sh.state {
		events = append(events, Event{At: now, SubjectKind: SubjectSwitch, Subject: sh.name, Kind: EventStateChange,
			From: string(sh.state), To: string(st), Reason: why,
			Evidence: map[string]any{"reachable": sh.reachable, "links": len(sh.links), "links_down": sh.down}})
		sh.state = st
	}
	return events
}

// computePlane derives a plane's state from its counters (O(1)).
func (e *Engine) computePlane(ph *planeHealth) (PlaneState, string) {
	h := &ph.health
	h.Drained = ph.drained
	h.CapacityRatio = 1
	if ph.totalW > 0 {
		h.CapacityRatio = ph.upW / ph.totalW
	}
	st, why := PlaneHealthy, ""
	switch {
	case ph.drained:
		st, why = PlaneDraining, "operator drain"
	case h.CapacityRatio < e.cfg.PlaneDownBelow:
		st, why = PlaneDown, fmt.Sprintf("%.0f%% of capacity left (down below %.0f%%)", 100*h.CapacityRatio, 100*e.cfg.PlaneDownBelow)
	case h.CapacityRatio < 1 || h.LinksDegraded > 0:
		st, why = PlaneDegraded, fmt.Sprintf("%d links down, %d degraded; %.0f%% of capacity left", h.LinksDown, h.LinksDegraded, 100*h.CapacityRatio)
	}
	h.State, h.Reason = st, why
	return st, why
}

// withRates fills a plane's traffic figures from its links' latest rates.
// (A remote switch's links count by the sums its owner reported.)
func withRates(ph *planeHealth, h PlaneHealth) PlaneHealth {
	var sum RateSums
	var remote map[*switchHealth]bool
	for _, lh := range ph.links {
		if lh.sw.remote {
			if !remote[lh.sw] {
				if remote == nil {
					remote = map[*switchHealth]bool{}
				}
				remote[lh.sw] = true
				sum.plus(lh.sw.traffic[ph.name])
			}
			continue
		}
		if r := lh.rates; r != nil {
			sum.add(r)
		}
	}
	if h.CapacityBps > 0 {
		h.Utilization = sum.TrafficBps / float64(h.CapacityBps)
	}
	h.LossRate, h.ECNRate = ratio(sum.Lost, sum.Pkts), ratio(sum.Marked, sum.OutPkts)
	return h
}

func (e *Engine) aggregatePlane(ph *planeHealth, now time.Time, cause string, events []Event) []Event {
	st, why := e.computePlane(ph)
	if st != ph.state {
		events = append(events, Event{At: now, SubjectKind: SubjectPlane, Subject: ph.name, Kind: EventStateChange,
			From: string(ph.state), To: string(st), Reason: why,
			Evidence: map[string]any{"cause": cause, "capacity_ratio": ph.health.CapacityRatio,
				"links_up": ph.health.LinksUp, "links_degraded": ph.health.LinksDegraded, "links_down": ph.health.LinksDown}})
		ph.state = st
		if st == PlaneDown {
			e.planeDowns.Add(1)
		}
	}
	return events
}

// PlaneDowns counts the planes' transitions to down since the engine
// started (not those restored from history). It takes no lock: a
// subscriber behind a burst of link events, or one that dropped some,
// learns of a plane's failure at once instead of waiting for the
// engine's lock between its batches.
func (e *Engine) PlaneDowns() uint64 { return e.planeDowns.Load() }

// PlaneHealth implements Health.
func (e *Engine) PlaneHealth(name string) (PlaneHealth, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	ph := e.planes[name]
	if ph == nil {
		return PlaneHealth{}, false
	}
	return ph.view(), true
}

// SwitchHealth implements Health.
func (e *Engine) SwitchHealth(name string) (SwitchHealth, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	sh := e.switches[name]
	if sh == nil {
		return SwitchHealth{}, false
	}
	return sh.view(), true
}

// LinkHealth implements Health.
func (e *Engine) LinkHealth(name string) (LinkHealth, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	lh := e.byName[name]
	if lh == nil {
		return LinkHealth{}, false
	}
	return lh.view(), true
}

// Snapshot returns the health of every plane, switch and link as of one
// instant: a computation that reads many of them (policy.Compute) never
// mixes states from before and after a transition. Links that are up are
// held by name only (their LinkHealth is State up): a computation at
// 32,000 links copies the few that are not, not all of them.
func (e *Engine) Snapshot() *HealthSnapshot {
	e.mu.RLock()
	defer e.mu.RUnlock()
	s := &HealthSnapshot{
		Planes:   make(map[string]PlaneHealth, len(e.planes)),
		Switches: make(map[string]SwitchHealth, len(e.switches)),
		Links:    map[string]LinkHealth{},
		known:    e.byName, // replaced, never changed, by SetTopology
	}
	for name, ph := range e.planes {
		s.Planes[name] = ph.view()
	}
	for name, sh := range e.switches {
		s.Switches[name] = sh.view()
	}
	for name, lh := range e.byName {
		if lh.state != LinkUp {
			s.Links[name] = lh.view()
		}
	}
	return s
}

func (ph *planeHealth) view() PlaneHealth {
	h := withRates(ph, ph.health)
	h.State = ph.state
	return h
}

func (sh *switchHealth) view() SwitchHealth {
	return SwitchHealth{State: sh.state, Reachable: sh.reachable, Synced: sh.synced, LastUpdate: sh.lastUpdate, Reason: sh.reason,
		CollectedBy: sh.owner}
}

func (lh *linkHealth) view() LinkHealth {
	h := LinkHealth{State: lh.state, Reason: lh.reason, Oper: lh.oper, Suppressed: lh.suppressed, Rates: lh.rates, LastUpdate: lh.lastUpdate}
	if lh.evidence.State != "" {
		ev := lh.evidence
		h.Evidence = &ev
	}
	return h
}

// Run calls Tick every interval until ctx ends.
func (e *Engine) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			e.Tick()
		}
	}
}
