package e2e

import (
	"encoding/json"
	"math"
	"slices"
	"time"
)

var jsonUnmarshal = json.Unmarshal

// Quantiles summarizes durations.
type Quantiles struct {
	N                       int
	P50, P90, P99, Max, Min time.Duration
}

func quantiles(d []time.Duration) Quantiles {
	if len(d) == 0 {
		return Quantiles{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(q float64) time.Duration {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return Quantiles{N: len(s), P50: at(0.5), P90: at(0.9), P99: at(0.99), Max: s[len(s)-1], Min: s[0]}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
