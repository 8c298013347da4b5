package planes

import (
	"flag"
	"time"
)

// HealthConfig holds the thresholds, hold times and damping of the health
// engine. docs/health.md explains each; DefaultHealthConfig gives the defaults.
type HealthConfig struct {
	// UpHold is how long a link must report oper-status UP before it is up
	// again after being down.
	UpHold time.Duration
	// UnreachableHold is how long a switch may be unreachable (its stream
	// down or silent) before its links, with no other evidence, count as down.
	UnreachableHold time.Duration

	// Degradation thresholds, as ratios of packets per second, evaluated
	// only above MinPktsPerSec so idle links do not flap on a stray error.
	ErrorRatio    float64 // (in-errors + in-fcs-errors) / in-pkts
	DiscardRatio  float64 // (in-discards + out-discards + queue drops) / (in-pkts + out-pkts)
	ECNRatio      float64 // ecn-marked / out-pkts
	Utilization   float64 // max(in, out) bits / speed; 0 = not a degradation criterion
	MinPktsPerSec float64
	// DegradeSamples consecutive samples over a threshold make a link
	// degraded; it recovers after ClearHold under ClearFactor × thresholds.
	DegradeSamples int
	ClearFactor    float64
	ClearHold      time.Duration

	// Flap damping (BGP-style): each down transition adds FlapPenalty; the
	// penalty halves every FlapHalfLife; above FlapSuppress the link stays
	// down until the penalty decays below FlapReuse.
	FlapDamping  bool
	FlapPenalty  float64
	FlapHalfLife time.Duration
	FlapSuppress float64
	FlapReuse    float64

	// PlaneDownBelow: a plane is down when the fraction of its link
	// capacity still up is below this; degraded when below 1.
	PlaneDownBelow float64
}

// DefaultHealthConfig returns the documented defaults.
func DefaultHealthConfig() HealthConfig {
	return HealthConfig{
		UpHold: 5 * time.Second, UnreachableHold: 30 * time.Second,
		ErrorRatio: 1e-4, DiscardRatio: 1e-3, ECNRatio: 0.2, MinPktsPerSec: 100,
		DegradeSamples: 2, ClearFactor: 0.5, ClearHold: 10 * time.Second,
		FlapDamping: true, FlapPenalty: 1000, FlapHalfLife: 15 * time.Second, FlapSuppress: 3000, FlapReuse: 1500,
		PlaneDownBelow: 0.5,
	}
}

// RegisterFlags registers the health settings on fs.
func (c *HealthConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.UpHold, "health-up-hold", c.UpHold, "time a link must stay oper-status UP before it is up again")
	fs.DurationVar(&c.UnreachableHold, "health-unreachable-hold", c.UnreachableHold, "time a switch may be unreachable before its links count as down")
	fs.Float64Var(&c.ErrorRatio, "health-error-ratio", c.ErrorRatio, "input error ratio over which a link is degraded")
	fs.Float64Var(&c.DiscardRatio, "health-discard-ratio", c.DiscardRatio, "discard ratio over which a link is degraded")
	fs.Float64Var(&c.ECNRatio, "health-ecn-ratio", c.ECNRatio, "ECN-marked ratio of output packets over which a link is degraded")
	fs.Float64Var(&c.Utilization, "health-utilization", c.Utilization, "utilisation over which a link is degraded (0 = never)")
	fs.Float64Var(&c.MinPktsPerSec, "health-min-pps", c.MinPktsPerSec, "packet rate under which ratios are not judged")
	fs.IntVar(&c.DegradeSamples, "health-degrade-samples", c.DegradeSamples, "consecutive samples over a threshold to degrade a link")
	fs.Float64Var(&c.ClearFactor, "health-clear-factor", c.ClearFactor, "fraction of a threshold a link must stay under to recover")
	fs.DurationVar(&c.ClearHold, "health-clear-hold", c.ClearHold, "time under the clear thresholds before a degraded link recovers")
	fs.BoolVar(&c.FlapDamping, "health-flap-damping", c.FlapDamping, "suppress links that flap (BGP-style penalty)")
	fs.Float64Var(&c.FlapPenalty, "health-flap-penalty", c.FlapPenalty, "penalty per down transition")
	fs.DurationVar(&c.FlapHalfLife, "health-flap-half-life", c.FlapHalfLife, "half-life of the flap penalty")
	fs.Float64Var(&c.FlapSuppress, "health-flap-suppress", c.FlapSuppress, "penalty over which a flapping link is held down")
	fs.Float64Var(&c.FlapReuse, "health-flap-reuse", c.FlapReuse, "penalty under which a suppressed link may come up")
	fs.Float64Var(&c.PlaneDownBelow, "health-plane-down-below", c.PlaneDownBelow, "fraction of a plane's capacity under which the plane is down")
}
