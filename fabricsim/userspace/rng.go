package userspace

import "math/rand/v2"

// rng is a per-goroutine random source, seeded from the plane's seed and the
// port, so that a run is repeatable for a given arrival order.
type rng struct{ r *rand.Rand }

func newRNG(seed int64, port int) *rng {
	return &rng{rand.New(rand.NewPCG(uint64(seed), uint64(port)+0x9e3779b97f4a7c15))}
}

func (r *rng) float64() float64 { return r.r.Float64() }
