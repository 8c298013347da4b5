package planes

import (
	"encoding/json"
	"time"
)

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
// The JSON names carry their units.
type InterfaceRates struct {
	Interval    time.Duration `json:"-"`
	InOctets    float64       `json:"in_octets_per_second"`
	OutOctets   float64       `json:"out_octets_per_second"`
	InPkts      float64       `json:"in_pkts_per_second"`
	OutPkts     float64       `json:"out_pkts_per_second"`
	InErrors    float64       `json:"in_errors_per_second"`
	InDiscards  float64       `json:"in_discards_per_second"`
	OutDiscards float64       `json:"out_discards_per_second"`
	InFCSErrors float64       `json:"in_fcs_errors_per_second"`
	ECNMarked   float64       `json:"ecn_marked_pkts_per_second"` // output queues, summed
	QueueDrops  float64       `json:"queue_dropped_pkts_per_second"`
}

// rateJSON is InterfaceRates with its interval in seconds.
type rateJSON struct {
	IntervalSeconds float64 `json:"interval_seconds"`
	rateFields
}

type rateFields InterfaceRates // without MarshalJSON

// MarshalJSON writes the interval in seconds (interval_seconds).
func (r InterfaceRates) MarshalJSON() ([]byte, error) {
	return json.Marshal(rateJSON{IntervalSeconds: r.Interval.Seconds(), rateFields: rateFields(r)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *InterfaceRates) UnmarshalJSON(data []byte) error {
	var j rateJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*r = InterfaceRates(j.rateFields)
	r.Interval = time.Duration(j.IntervalSeconds * float64(time.Second))
	return nil
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
