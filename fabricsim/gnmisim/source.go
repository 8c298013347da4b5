package gnmisim

import (
	"fmt"
	"sync"
	"time"
)

// Counters are one port's interface counters, named as the OpenConfig
// leaves under /interfaces/interface/state/counters.
type Counters struct {
	InOctets             uint64
	OutOctets            uint64
	InPkts               uint64
	OutPkts              uint64
	InErrors             uint64
	InDiscards           uint64
	OutDiscards          uint64
	InFCSErrors          uint64
	InterfaceTransitions uint64
}

// QueueCounters are one output queue's counters
// (/qos/interfaces/interface/output/queues/queue/state).
type QueueCounters struct {
	Name          string
	ECNMarkedPkts uint64
	DroppedPkts   uint64
}

// PortState is what a CounterSource reports about one switch port.
type PortState struct {
	Name       string // interface name, e.g. "eth1"
	OperStatus string // OpenConfig oper-status: "UP", "DOWN", "LOWER_LAYER_DOWN", ...
	AdminState string // "UP" or "DOWN"; "" means "UP"
	Counters   Counters
	Queues     []QueueCounters // nil: one queue named DefaultQueue with zero counters
}

// DefaultQueue names the single output queue of a port whose source reports none.
const DefaultQueue = "0"

// CounterSource is where a switch reads its ports from: the emulated
// fabric. Ports appends the current state of every port to dst and returns
// it; it is called once per tick and must be safe for concurrent use.
// The set of port names must not change over a source's life.
type CounterSource interface {
	Ports(dst []PortState) ([]PortState, error)
}

// Counter names one published counter, for SetCounter and AddCounter.
type Counter int

// Counters a test can set. ECNMarked and QueueDropped are the port's first
// queue.
const (
	InOctets Counter = iota
	OutOctets
	InPkts
	OutPkts
	InErrors
	InDiscards
	OutDiscards
	InFCSErrors
	InterfaceTransitions
	ECNMarked
	QueueDropped
	numCounters
)

// counterLeaves are the OpenConfig leaf names of the Counters fields, in
// Counter order.
var counterLeaves = [...]string{
	"in-octets", "out-octets", "in-pkts", "out-pkts", "in-errors", "in-discards",
	"out-discards", "in-fcs-errors", "interface-transitions",
}

func (c Counter) String() string {
	switch {
	case c >= 0 && int(c) < len(counterLeaves):
		return counterLeaves[c]
	case c == ECNMarked:
		return "ecn-marked-pkts"
	case c == QueueDropped:
		return "dropped-pkts"
	}
	return fmt.Sprintf("Counter(%d)", int(c))
}

// vector returns the counters as an array indexed by Counter.
func (p *PortState) vector() [numCounters]uint64 {
	c := p.Counters
	v := [numCounters]uint64{c.InOctets, c.OutOctets, c.InPkts, c.OutPkts, c.InErrors,
		c.InDiscards, c.OutDiscards, c.InFCSErrors, c.InterfaceTransitions}
	if len(p.Queues) > 0 {
		v[ECNMarked], v[QueueDropped] = p.Queues[0].ECNMarkedPkts, p.Queues[0].DroppedPkts
	}
	return v
}

// StaticSource is a CounterSource whose ports a test sets by hand.
type StaticSource struct {
	mu    sync.Mutex
	ports []PortState
}

// NewStaticSource returns a source with the named ports, UP, with zero
// counters and the given queues (none: DefaultQueue).
func NewStaticSource(ports []string, queues ...string) *StaticSource {
	if len(queues) == 0 {
		queues = []string{DefaultQueue}
	}
	s := &StaticSource{}
	for _, name := range ports {
		p := PortState{Name: name, OperStatus: "UP", AdminState: "UP"}
		for _, q := range queues {
			p.Queues = append(p.Queues, QueueCounters{Name: q})
		}
		s.ports = append(s.ports, p)
	}
	return s
}

// Ports implements CounterSource.
func (s *StaticSource) Ports(dst []PortState) ([]PortState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.ports {
		p.Queues = append([]QueueCounters(nil), p.Queues...)
		dst = append(dst, p)
	}
	return dst, nil
}

// Update calls fn with the named port under the source's lock.
func (s *StaticSource) Update(port string, fn func(*PortState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.ports {
		if s.ports[i].Name == port {
			fn(&s.ports[i])
		}
	}
}

// Traffic adds pkts packets of size bytes in each direction on every UP port.
func (s *StaticSource) Traffic(pkts, size uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.ports {
		p := &s.ports[i]
		if p.OperStatus != "UP" {
			continue
		}
		p.Counters.InPkts += pkts
		p.Counters.OutPkts += pkts
		p.Counters.InOctets += pkts * size
		p.Counters.OutOctets += pkts * size
	}
}

// Synthetic returns a source of n UP ports named eth1..ethN whose counters
// grow with time as if each port carried octetsPerSec in each direction in
// 4096-byte packets, with one ECN mark per 1000 packets. It keeps no
// per-port state, so it costs nothing between ticks.
func Synthetic(n int, octetsPerSec float64) CounterSource {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("eth%d", i+1)
	}
	return &synthetic{names: names, rate: octetsPerSec, epoch: time.Now()}
}

type synthetic struct {
	names []string
	rate  float64
	epoch time.Time
}

func (s *synthetic) Ports(dst []PortState) ([]PortState, error) {
	el := time.Since(s.epoch).Seconds()
	octets := uint64(el * s.rate)
	pkts := octets / 4096
	for i, name := range s.names {
		o := octets + uint64(i)*4096 // ports differ a little
		dst = append(dst, PortState{
			Name: name, OperStatus: "UP", AdminState: "UP",
			Counters: Counters{InOctets: o, OutOctets: o, InPkts: pkts, OutPkts: pkts},
			Queues:   []QueueCounters{{Name: DefaultQueue, ECNMarkedPkts: pkts / 1000}},
		})
	}
	return dst, nil
}
