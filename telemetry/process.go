package telemetry

import (
	"bytes"
	"log/slog"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/multiplane/multiplane/planes"
)

// Counter indexes of an interface's rate vector, in planes.InterfaceRates order.
const (
	cInOctets = iota
	cOutOctets
	cInPkts
	cOutPkts
	cInErrors
	cInDiscards
	cOutDiscards
	cInFCSErrors
	numIfCounters
)

// Queue counter indexes.
const (
	qECNMarked = iota
	qDropped
	numQueueCounters
)

func ifCounter(leaf []byte) (int, bool) {
	switch string(leaf) {
	case "in-octets":
		return cInOctets, true
	case "out-octets":
		return cOutOctets, true
	case "in-pkts":
		return cInPkts, true
	case "out-pkts":
		return cOutPkts, true
	case "in-errors":
		return cInErrors, true
	case "in-discards":
		return cInDiscards, true
	case "out-discards":
		return cOutDiscards, true
	case "in-fcs-errors":
		return cInFCSErrors, true
	}
	return 0, false
}

// counter is one cumulative counter and the last rate computed from it.
type counter struct {
	v    uint64
	ts   int64 // target timestamp of v, ns; 0 = no baseline
	rate float64
}

// step moves the counter to v at ts. It returns the interval and whether a
// rate came out; reset reports a discontinuity (a value lower than before
// that is no plausible wrap, or an implausible jump), which yields no rate.
// stale reports a timestamp not after the baseline's (ignored).
func (c *counter) step(v uint64, ts int64, maxRate float64) (dt int64, ok, reset, stale bool) {
	if c.ts == 0 {
		c.v, c.ts, c.rate = v, ts, 0
		return 0, false, false, false
	}
	if ts <= c.ts {
		return 0, false, false, true
	}
	dt = ts - c.ts
	delta := v - c.v // mod 2^64: a wrap gives the true increase
	rate := float64(delta) / (float64(dt) / 1e9)
	c.v, c.ts = v, ts
	if rate > maxRate {
		// Lower than before and no plausible wrap (a reboot), or an absurd jump.
		c.rate = 0
		return dt, false, true, false
	}
	c.rate = rate
	return dt, true, false, false
}

type queueState struct {
	name string
	ctr  [numQueueCounters]counter
}

type ifaceState struct {
	name    string
	oper    planes.OperStatus
	operTS  int64
	ctr     [numIfCounters]counter
	queues  []queueState
	touched bool
	// per notification
	newOper  bool
	rated    bool
	reset    bool
	interval int64
}

func (s *ifaceState) queue(name []byte) *queueState {
	for i := range s.queues {
		if s.queues[i].name == string(name) {
			return &s.queues[i]
		}
	}
	s.queues = append(s.queues, queueState{name: string(name)})
	return &s.queues[len(s.queues)-1]
}

// procMetrics are the counters a processor bumps; nil fields are skipped.
type procMetrics struct {
	typeMismatch, stale, reset prometheus.Counter
}

// processor turns one switch's notifications into samples. It is used by
// one goroutine at a time.
type processor struct {
	sw       string
	maxRate  float64
	ifaces   map[string]*ifaceState // only expected interfaces
	last     *ifaceState
	touched  []*ifaceState
	batch    []planes.InterfaceSample
	mismatch map[string]bool // (path) already logged
	m        procMetrics
	log      *slog.Logger
}

func newProcessor(sw string, expected []string, maxRate float64, m procMetrics, log *slog.Logger) *processor {
	p := &processor{sw: sw, maxRate: maxRate, m: m, log: log, mismatch: map[string]bool{}}
	p.setExpected(expected)
	return p
}

// setExpected sets the interfaces samples are made for, keeping the state
// of those that stay.
func (p *processor) setExpected(names []string) {
	old := p.ifaces
	p.ifaces = make(map[string]*ifaceState, len(names))
	for _, n := range names {
		if s := old[n]; s != nil {
			p.ifaces[n] = s
		} else {
			p.ifaces[n] = &ifaceState{name: n}
		}
	}
	p.last = nil
}

// resetBaselines forgets every counter value (a new stream: the first
// values it brings give no rate).
func (p *processor) resetBaselines() {
	for _, s := range p.ifaces {
		s.ctr = [numIfCounters]counter{}
		s.queues = s.queues[:0]
		s.operTS = 0
	}
}

// missing returns the expected interfaces of which this stream has brought
// no oper-status yet, sorted.
func (p *processor) missing() []string {
	var m []string
	for name, s := range p.ifaces {
		if s.operTS == 0 {
			m = append(m, name)
		}
	}
	sort.Strings(m)
	return m
}

func (p *processor) iface(name []byte) *ifaceState {
	if p.last != nil && p.last.name == string(name) {
		return p.last
	}
	s := p.ifaces[string(name)]
	if s != nil {
		p.last = s
	}
	return s
}

func (p *processor) touch(s *ifaceState) {
	if !s.touched {
		s.touched = true
		p.touched = append(p.touched, s)
	}
}

func elemIs(e *wireElem, name string) bool { return string(e.name) == name }

// firstElemIs compares the first element's name, ignoring a module
// qualifier ("openconfig-interfaces:interfaces").
func firstElemIs(e *wireElem, name string) bool {
	n := e.name
	if i := bytes.IndexByte(n, ':'); i >= 0 {
		n = n[i+1:]
	}
	return string(n) == name
}

// process turns one notification into samples (valid until the next call).
func (p *processor) process(n *wireNotif) []planes.InterfaceSample {
	p.batch = p.batch[:0]
	for i := range n.updates {
		p.update(n, &n.updates[i])
	}
	at := time.Unix(0, n.ts)
	for _, s := range p.touched {
		smp := planes.InterfaceSample{Switch: p.sw, Interface: s.name, At: at}
		if s.newOper {
			smp.Oper = s.oper
		}
		if s.rated && !s.reset {
			r := &planes.InterfaceRates{
				Interval:    time.Duration(s.interval),
				InOctets:    s.ctr[cInOctets].rate,
				OutOctets:   s.ctr[cOutOctets].rate,
				InPkts:      s.ctr[cInPkts].rate,
				OutPkts:     s.ctr[cOutPkts].rate,
				InErrors:    s.ctr[cInErrors].rate,
				InDiscards:  s.ctr[cInDiscards].rate,
				OutDiscards: s.ctr[cOutDiscards].rate,
				InFCSErrors: s.ctr[cInFCSErrors].rate,
			}
			for i := range s.queues {
				r.ECNMarked += s.queues[i].ctr[qECNMarked].rate
				r.QueueDrops += s.queues[i].ctr[qDropped].rate
			}
			smp.Rates = r
		}
		if s.reset && p.m.reset != nil {
			p.m.reset.Inc()
		}
		s.touched, s.newOper, s.rated, s.reset, s.interval = false, false, false, false, 0
		if smp.Oper != "" || smp.Rates != nil {
			p.batch = append(p.batch, smp)
		}
	}
	p.touched = p.touched[:0]
	return p.batch
}

// update classifies one leaf by its full path (prefix + path) and applies it.
func (p *processor) update(nt *wireNotif, u *wireUpdate) {
	n := nt.preN + u.n
	if n < 4 {
		return
	}
	ts := nt.ts
	el := func(i int) *wireElem {
		if i < nt.preN {
			return &nt.elems[nt.preFrom+i]
		}
		return &nt.elems[u.from+i-nt.preN]
	}
	switch e0 := el(0); {
	case firstElemIs(e0, "interfaces"):
		e1 := el(1)
		if !elemIs(e1, "interface") || !elemIs(el(2), "state") {
			return
		}
		s := p.iface(nt.key(e1, "name"))
		if s == nil {
			return
		}
		switch leaf := el(3); {
		case n == 4 && elemIs(leaf, "oper-status"):
			oper, ok := parseOper(u.val)
			if !ok {
				p.typeMismatch(s.name, "state/oper-status", u.val.kind)
				return
			}
			if ts < s.operTS {
				p.count(p.m.stale)
				return
			}
			s.oper, s.operTS, s.newOper = oper, ts, true
			p.touch(s)
		case n == 5 && elemIs(leaf, "counters"):
			leaf := el(4)
			i, ok := ifCounter(leaf.name)
			if !ok {
				return // interface-transitions, carrier-transitions, ...: not used
			}
			v, ok := parseCounter(u.val)
			if !ok {
				p.typeMismatch(s.name, "state/counters/"+string(leaf.name), u.val.kind)
				return
			}
			p.step(s, &s.ctr[i], v, ts)
		}
	case firstElemIs(e0, "qos"):
		if n != 8 || !elemIs(el(1), "interfaces") || !elemIs(el(2), "interface") || !elemIs(el(3), "output") ||
			!elemIs(el(4), "queues") || !elemIs(el(5), "queue") || !elemIs(el(6), "state") {
			return
		}
		s := p.iface(nt.key(el(2), "interface-id"))
		if s == nil {
			return
		}
		var i int
		switch leaf := el(7); {
		case elemIs(leaf, "ecn-marked-pkts"):
			i = qECNMarked
		case elemIs(leaf, "dropped-pkts"):
			i = qDropped
		default:
			return
		}
		qname := nt.key(el(5), "name")
		v, ok := parseCounter(u.val)
		if !ok {
			p.typeMismatch(s.name, "qos/queue["+string(qname)+"]/state/"+string(el(7).name), u.val.kind)
			return
		}
		// Queue rates ride along with the interface's next counter sample
		// (within one interval), so a port gives one rate sample per
		// interval, not one per container.
		if _, _, _, stale := s.queue(qname).ctr[i].step(v, ts, p.maxRate); stale {
			p.count(p.m.stale)
		}
	}
}

func (p *processor) step(s *ifaceState, c *counter, v uint64, ts int64) {
	dt, ok, reset, stale := c.step(v, ts, p.maxRate)
	switch {
	case stale:
		p.count(p.m.stale)
		return
	case reset:
		s.reset = true
	case ok:
		s.rated = true
		s.interval = max(s.interval, dt)
	}
	p.touch(s)
}

func (p *processor) count(c prometheus.Counter) {
	if c != nil {
		c.Inc()
	}
}

// typeMismatch counts a value of the wrong type and logs it once per path.
func (p *processor) typeMismatch(iface, leaf string, kind valKind) {
	p.count(p.m.typeMismatch)
	key := iface + "/" + leaf
	if p.mismatch[key] {
		return
	}
	p.mismatch[key] = true
	if p.log != nil {
		p.log.Warn("value of unexpected type ignored", "interface", iface, "path", leaf, "type", kind.String())
	}
}

// parseCounter accepts a counter as uint_val, a non-negative int_val, or a
// JSON number or decimal string (RFC 7951 encodes uint64 as a string).
func parseCounter(v wireVal) (uint64, bool) {
	switch v.kind {
	case kindUint:
		return v.u, true
	case kindInt:
		return v.u, int64(v.u) >= 0
	case kindJSON, kindJSONIETF:
		b := bytes.Trim(bytes.TrimSpace(v.b), `"`)
		u, err := strconv.ParseUint(string(b), 10, 64)
		return u, err == nil
	}
	return 0, false
}

// parseOper accepts an OpenConfig oper-status enum as string_val or JSON
// string, optionally module-qualified.
func parseOper(v wireVal) (planes.OperStatus, bool) {
	var s []byte
	switch v.kind {
	case kindString, kindASCII:
		s = v.b
	case kindJSON, kindJSONIETF:
		s = bytes.Trim(bytes.TrimSpace(v.b), `"`)
	default:
		return "", false
	}
	if i := bytes.LastIndexByte(s, ':'); i >= 0 {
		s = s[i+1:]
	}
	switch string(s) {
	case "UP":
		return planes.OperUp, true
	case "DOWN":
		return planes.OperDown, true
	case "TESTING", "UNKNOWN", "DORMANT", "NOT_PRESENT", "LOWER_LAYER_DOWN":
		return planes.OperStatus(s), true
	}
	return "", false
}
