package abuse

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"
)

// percentile is the nearest-rank q-quantile (0 < q ≤ 1) of sorted
// durations; 0 for none.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// Millis is a duration that marshals to JSON as milliseconds.
type Millis time.Duration

// MarshalJSON writes milliseconds with microsecond resolution.
func (m Millis) MarshalJSON() ([]byte, error) {
	return json.Marshal(math.Round(float64(time.Duration(m).Microseconds())) / 1000)
}

func (m Millis) String() string {
	return fmt.Sprintf("%.2f ms", float64(time.Duration(m).Microseconds())/1000)
}

// TrafficStats summarizes the legitimate requests of one window.
type TrafficStats struct {
	Requests  int     `json:"requests"`
	Failed    int     `json:"failed"` // not 200, or a transport error
	ReqPerSec float64 `json:"req_per_sec"`
	P50       Millis  `json:"p50_ms"`
	P99       Millis  `json:"p99_ms"`
	Max       Millis  `json:"max_ms"`
}

// summarize computes the stats of latencies (of successful requests) over
// a window.
func summarize(latencies []time.Duration, failed int, window time.Duration) TrafficStats {
	s := slices.Clone(latencies)
	slices.Sort(s)
	st := TrafficStats{Requests: len(s) + failed, Failed: failed,
		P50: Millis(percentile(s, 0.5)), P99: Millis(percentile(s, 0.99)), Max: Millis(percentile(s, 1))}
	if window > 0 {
		st.ReqPerSec = float64(len(s)) / window.Seconds()
	}
	return st
}
