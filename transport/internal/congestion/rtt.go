package congestion

import (
	"sync"
	"time"
)

// RTT limits.
const (
	DefaultInitialRTT = 1 * time.Millisecond
	DefaultMinRTO     = 4 * time.Millisecond
	DefaultMaxRTO     = 1 * time.Second
)

// RTTStats estimates the round-trip time of one path. Each sample comes
// with the part of it spent waiting in the endpoints (the receiver holding
// the packet before acknowledging it, and the ACK waiting for the sender's
// poll loop, both measured from kernel receive times). The smoothed RTT,
// its deviation and the RTO use whole samples: they bound how long an
// acknowledgement takes to be processed. Min, Latest and RoundMin use the
// fabric's share (sample less endpoint delay): they are the congestion
// signal, which on a busy host would otherwise mostly measure scheduling.
// It is safe for concurrent use: connections to one peer share it.
type RTTStats struct {
	mu                sync.Mutex
	smoothed, meanDev time.Duration
	// min, latest, fabricSmoothed: fabric delay (endpoint delay removed).
	min, latest, fabricSmoothed time.Duration
	// roundMin is the smallest fabric sample of the current round, a filter
	// against what noise is left: a real queue raises every sample in a round.
	roundMin, lastRoundMin time.Duration
	roundStart             time.Time
	hasSample              bool
	MinRTO, MaxRTO         time.Duration
	// maxCur and maxPrev are the largest samples of the current and the
	// previous maxWindow: the RTO stays above them, so a sender whose
	// acknowledgements are held up by scheduling stalls stops firing
	// spurious timeouts after the first one.
	maxCur, maxPrev time.Duration
	maxStart        time.Time
}

const maxWindow = time.Second

// NewRTTStats returns an estimator with default limits.
func NewRTTStats() *RTTStats {
	return &RTTStats{MinRTO: DefaultMinRTO, MaxRTO: DefaultMaxRTO}
}

// UpdateMax records a delay that counts only for the RTO floor (for
// example the age of a packet acknowledged after it was declared lost).
func (r *RTTStats) UpdateMax(now time.Time, sample time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.updateMax(now, sample)
}

func (r *RTTStats) updateMax(now time.Time, sample time.Duration) {
	if el := now.Sub(r.maxStart); el >= maxWindow {
		r.maxPrev = r.maxCur
		if el >= 2*maxWindow {
			r.maxPrev = 0
		}
		r.maxCur, r.maxStart = 0, now
	}
	if sample > r.maxCur {
		r.maxCur = sample
	}
}

// Update adds a sample measured at now, of which endpointDelay was spent
// in the endpoints. A sample whose endpoint delay is not smaller than it
// (clocks that disagree) counts whole.
func (r *RTTStats) Update(now time.Time, sample, endpointDelay time.Duration) {
	if sample <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	fabric := sample
	if endpointDelay > 0 && endpointDelay < sample {
		fabric = sample - endpointDelay
	}
	if r.min == 0 || fabric < r.min {
		r.min = fabric
	}
	r.updateMax(now, sample)
	r.latest = fabric
	if !r.hasSample {
		r.hasSample = true
		r.smoothed = sample
		r.fabricSmoothed = fabric
		r.meanDev = sample / 2
		r.roundMin, r.lastRoundMin, r.roundStart = fabric, fabric, now
		return
	}
	d := r.smoothed - sample
	if d < 0 {
		d = -d
	}
	r.meanDev = (3*r.meanDev + d) / 4
	r.smoothed = (7*r.smoothed + sample) / 8
	r.fabricSmoothed = (7*r.fabricSmoothed + fabric) / 8
	if fabric < r.roundMin {
		r.roundMin = fabric
	}
	if now.Sub(r.roundStart) >= r.smoothed {
		r.lastRoundMin = r.roundMin
		r.roundMin = fabric
		r.roundStart = now
	}
}

// HasSample reports whether any sample arrived.
func (r *RTTStats) HasSample() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hasSample
}

// Min returns the smallest fabric sample seen.
func (r *RTTStats) Min() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.min
}

// Latest returns the last fabric sample.
func (r *RTTStats) Latest() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.latest
}

// Smoothed returns the smoothed RTT, or DefaultInitialRTT before any sample.
func (r *RTTStats) Smoothed() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.smoothedRTT()
}

func (r *RTTStats) smoothedRTT() time.Duration {
	if !r.hasSample {
		return DefaultInitialRTT
	}
	return r.smoothed
}

// FabricSmoothed returns the smoothed fabric share of the samples (at
// least the minimum), or DefaultInitialRTT before any sample: how long a
// window spends in the fabric, whatever the hosts add to acknowledging it.
func (r *RTTStats) FabricSmoothed() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.hasSample {
		return DefaultInitialRTT
	}
	return max(r.fabricSmoothed, r.min)
}

// RoundMin returns the smallest fabric sample of the last complete round
// (or of the current one if it is already smaller).
func (r *RTTStats) RoundMin() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.roundMin < r.lastRoundMin {
		return r.roundMin
	}
	return r.lastRoundMin
}

// MeanDeviation returns the RTT variation.
func (r *RTTStats) MeanDeviation() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.meanDev
}

// RTO returns the retransmission timeout: smoothed + 4 × deviation, within
// [MinRTO, MaxRTO].
func (r *RTTStats) RTO() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	rto := r.smoothedRTT() + 4*r.meanDev
	if !r.hasSample {
		rto = 2 * DefaultInitialRTT
	}
	if m := max(r.maxCur, r.maxPrev); rto < m+m/4 {
		rto = m + m/4
	}
	if rto < r.MinRTO {
		rto = r.MinRTO
	}
	if r.MaxRTO > 0 && rto > r.MaxRTO {
		rto = r.MaxRTO
	}
	return rto
}
