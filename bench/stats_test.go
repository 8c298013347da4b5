package bench

import (
	"math"
	"testing"
	"time"
)

func TestJain(t *testing.T) {
	for _, tc := range []struct {
		name string
		xs   []float64
		want float64
	}{
		{"empty", nil, 1},
		{"zeros", []float64{0, 0, 0}, 1},
		{"equal", []float64{5, 5, 5, 5}, 1},
		{"one-takes-all", []float64{8, 0, 0, 0}, 0.25},
		{"two-to-one", []float64{2, 1}, 9.0 / 10},
		{"half-idle", []float64{1, 1, 0, 0}, 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Jain(tc.xs); math.Abs(got-tc.want) > 1e-12 {
				t.Fatalf("Jain(%v) = %v, want %v", tc.xs, got, tc.want)
			}
		})
	}
	if got := jainInts([]int64{3, 1}); math.Abs(got-16.0/20) > 1e-12 {
		t.Fatalf("jainInts = %v", got)
	}
}

func TestLatencyStats(t *testing.T) {
	us := time.Microsecond
	// 1..1000 µs, shuffled: median 500, p99 990, p99.9 999.
	var samples []time.Duration
	for i := range 1000 {
		samples = append(samples, time.Duration((i*7919)%1000+1)*us)
	}
	st := latencyStats(64, samples)
	want := LatencyStats{Bytes: 64, Iterations: 1000, MinUs: 1, MaxUs: 1000, TypicalUs: 500, AvgUs: 500.5,
		StdevUs: math.Sqrt((1000*1000 - 1) / 12.0), P99Us: 990, P999Us: 999}
	if math.Abs(st.StdevUs-want.StdevUs) > 1e-9 {
		t.Fatalf("stdev %v, want %v", st.StdevUs, want.StdevUs)
	}
	st.StdevUs = want.StdevUs
	if st != want {
		t.Fatalf("got %+v\nwant %+v", st, want)
	}
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		want    LatencyStats
	}{
		{"none", nil, LatencyStats{Bytes: 8}},
		{"one", []time.Duration{3 * us}, LatencyStats{Bytes: 8, Iterations: 1, MinUs: 3, MaxUs: 3, TypicalUs: 3, AvgUs: 3, P99Us: 3, P999Us: 3}},
		{"two", []time.Duration{4 * us, 2 * us}, LatencyStats{Bytes: 8, Iterations: 2, MinUs: 2, MaxUs: 4, TypicalUs: 2, AvgUs: 3, StdevUs: 1, P99Us: 4, P999Us: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := latencyStats(8, tc.samples); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
