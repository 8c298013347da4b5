package planes

import "time"

// OperStatus is an interface's OpenConfig oper-status (UP, DOWN, TESTING,
// UNKNOWN, DORMANT, NOT_PRESENT, LOWER_LAYER_DOWN).
type OperStatus string

// Oper-status values the health engine distinguishes.
const (
	OperUp   OperStatus = "UP"
	OperDown OperStatus = "DOWN"
)

// InterfaceRates are per-second rates computed from counter deltas over
// Interval. Every rate is ≥ 0: counter wraps and resets never show here.
type InterfaceRates struct {
	Interval    time.Duration `json:"interval"`
	InOctets    float64       `json:"in_octets"`
	OutOctets   float64       `json:"out_octets"`
	InPkts      float64       `json:"in_pkts"`
	OutPkts     float64       `json:"out_pkts"`
	InErrors    float64       `json:"in_errors"`
	InDiscards  float64       `json:"in_discards"`
	OutDiscards float64       `json:"out_discards"`
	InFCSErrors float64       `json:"in_fcs_errors"`
	ECNMarked   float64       `json:"ecn_marked_pkts"` // output queues, summed
	QueueDrops  float64       `json:"queue_dropped_pkts"`
}

// LossRatio is errors and discards per packet.
func (r *InterfaceRates) LossRatio() float64 {
	return ratio(r.InErrors+r.InDiscards+r.OutDiscards+r.QueueDrops, r.InPkts+r.OutPkts)
}

// ECNRatio is ECN-marked output packets per output packet.
func (r *InterfaceRates) ECNRatio() float64 { return ratio(r.ECNMarked, r.OutPkts) }

// TrafficBps is the busier direction's traffic in bit/s.
func (r *InterfaceRates) TrafficBps() float64 { return max(r.InOctets, r.OutOctets) * 8 }

// InterfaceSample is what telemetry learned about one switch interface at
// one time: its oper-status, its rates, or both.
type InterfaceSample struct {
	Switch    string
	Interface string
	At        time.Time  // the target's timestamp
	Oper      OperStatus // "" when this sample has no oper-status
	Rates     *InterfaceRates
}

// SwitchReachability says whether a switch's telemetry stream is alive.
// A switch is unreachable when its stream is down, or silent past the
// keepalive timeout.
type SwitchReachability struct {
	Switch    string
	Reachable bool
	Synced    bool // sync_response seen on the current stream
	At        time.Time
	Reason    string
}

// Observer takes telemetry in: the health engine implements it and the
// collector feeds it, in batches.
type Observer interface {
	ObserveInterfaces(batch []InterfaceSample)
	ObserveSwitch(r SwitchReachability)
}

// LinkEvidence is what the endpoints' own traffic says of a link (package
// evidence): LinkUp when the endpoint reaches peers over it, LinkDown when
// it reaches none of those it sends to there. The engine judges a link by
// it only while the link's switch is unreachable.
type LinkEvidence struct {
	State  LinkState `json:"state"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"` // when this verdict was first seen
}
