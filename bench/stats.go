package bench

import (
	"math"
	"slices"
	"time"
)

// Jain returns Jain's fairness index of xs, (Σx)² / (n·Σx²): 1 when every
// x is equal, 1/n when one x has everything. It is 1 for an empty slice
// or one of all zeros (nothing to be unfair about).
func Jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if len(xs) == 0 || sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}

func jainInts(xs []int64) float64 {
	f := make([]float64, len(xs))
	for i, x := range xs {
		f[i] = float64(x)
	}
	return Jain(f)
}

// LatencyStats are perftest's latency columns for one message size, in
// microseconds of round trip time.
type LatencyStats struct {
	Bytes      int     `json:"bytes"`
	Iterations int     `json:"iterations"`
	MinUs      float64 `json:"t_min_us"`
	MaxUs      float64 `json:"t_max_us"`
	TypicalUs  float64 `json:"t_typical_us"` // the median
	AvgUs      float64 `json:"t_avg_us"`
	StdevUs    float64 `json:"t_stdev_us"` // population standard deviation
	P99Us      float64 `json:"p99_us"`
	P999Us     float64 `json:"p99_9_us"`
}

// latencyStats summarises round trip samples (sorted in place). The
// percentiles are nearest-rank: the smallest sample with at least p of all
// samples at or below it.
func latencyStats(size int, samples []time.Duration) LatencyStats {
	st := LatencyStats{Bytes: size, Iterations: len(samples)}
	if len(samples) == 0 {
		return st
	}
	slices.Sort(samples)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(samples)))) - 1
		return samples[max(0, min(i, len(samples)-1))]
	}
	var sum float64
	for _, s := range samples {
		sum += us(s)
	}
	avg := sum / float64(len(samples))
	var dev float64
	for _, s := range samples {
		d := us(s) - avg
		dev += d * d
	}
	st.MinUs, st.MaxUs = us(samples[0]), us(samples[len(samples)-1])
	st.TypicalUs = us(rank(0.5))
	st.AvgUs = avg
	st.StdevUs = math.Sqrt(dev / float64(len(samples)))
	st.P99Us, st.P999Us = us(rank(0.99)), us(rank(0.999))
	return st
}
