package telemetry

import "time"

// backoff returns the delay before reconnect attempt n (0-based): min × 2^n
// capped at max, with "equal jitter" (half fixed, half uniform random, r in
// [0,1)), so a fleet of switches that dropped together does not reconnect
// in lockstep, and no delay is ever below half the nominal one.
func backoff(n int, min, max time.Duration, r float64) time.Duration {
	d := min
	for i := 0; i < n && d < max; i++ {
		d *= 2
	}
	if d > max || d <= 0 {
		d = max
	}
	half := d / 2
	return half + time.Duration(r*float64(d-half))
}
