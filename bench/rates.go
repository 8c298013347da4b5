package bench

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// rate is a bit/s flag: a number with an optional K, M or G suffix (10^3,
// 10^6, 10^9), e.g. 300M.
type rate float64

func (r *rate) String() string { return formatRate(float64(*r)) }

func (r *rate) Set(v string) error {
	x, err := parseRate(v)
	*r = rate(x)
	return err
}

func parseRate(v string) (float64, error) {
	s := strings.TrimSpace(v)
	mult := 1.0
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			mult = 1e3
		case 'm', 'M':
			mult = 1e6
		case 'g', 'G':
			mult = 1e9
		}
		if mult != 1 {
			s = s[:n-1]
		}
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil || x < 0 || x*mult > 1e15 {
		return 0, fmt.Errorf("rate %q: want bits per second, e.g. 300M", v)
	}
	return x * mult, nil
}

func formatRate(bps float64) string {
	if bps == 0 {
		return "0"
	}
	return strconv.FormatFloat(bps/1e6, 'f', -1, 64) + "M"
}

// RateStep is --egress-cap-at: at After into the run, the client's egress
// cap becomes Bps (through transport.SetRates, as a rate policy does).
type RateStep struct {
	After time.Duration
	Bps   float64
}

type rateStep RateStep

func (s *rateStep) String() string {
	if s == nil || s.After == 0 {
		return ""
	}
	return fmt.Sprintf("%v:%s", s.After, formatRate(s.Bps))
}

func (s *rateStep) Set(v string) error {
	at, bps, ok := strings.Cut(v, ":")
	if !ok {
		return errors.New("want DURATION:RATE, e.g. 3s:300M")
	}
	var d seconds
	if err := d.Set(at); err != nil || d <= 0 {
		return fmt.Errorf("%q: want a positive duration before the colon", at)
	}
	x, err := parseRate(bps)
	if err != nil {
		return err
	}
	*s = rateStep{After: time.Duration(d), Bps: x}
	return nil
}

// egressCapper is a transport whose client egress cap can change at run
// time (package transport's).
type egressCapper interface {
	SetEgressCap(bps float64) error
}

// egressRecorder is a transport that counts what its client endpoint's
// pacers release (package transport's, with --series).
type egressRecorder interface {
	egressMeter() *seriesMeter // nil: not recording
}

// RateChange is when a client changed its egress cap.
type RateChange struct {
	AtUnixNs  int64   `json:"at_unix_ns"`
	EgressBps float64 `json:"egress_bps"` // 0: none
}

// Series is bytes in buckets of a fixed width from a start (--series): a
// server's verified goodput from its first message, a client's egress from
// the start of its run.
type Series struct {
	WidthSeconds float64   `json:"width_s"`
	StartUnixNs  int64     `json:"start_unix_ns"`
	Bps          []float64 `json:"bps"`
}

// seriesMeter counts bytes into buckets of width from start.
type seriesMeter struct {
	width time.Duration
	mu    sync.Mutex
	start time.Time
	bytes []int64
}

// maxSeriesBuckets bounds a series' memory (a day at 10 ms is 8.6 M).
const maxSeriesBuckets = 1 << 20

func (s *seriesMeter) begin(start time.Time) {
	s.mu.Lock()
	s.start = start
	s.mu.Unlock()
}

func (s *seriesMeter) add(now time.Time, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.start.IsZero() || now.Before(s.start) {
		return
	}
	i := int(now.Sub(s.start) / s.width)
	if i >= maxSeriesBuckets {
		return
	}
	for len(s.bytes) <= i {
		s.bytes = append(s.bytes, 0)
	}
	s.bytes[i] += int64(n)
}

func (s *seriesMeter) result() *Series {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &Series{WidthSeconds: s.width.Seconds(), Bps: make([]float64, len(s.bytes))}
	if !s.start.IsZero() {
		out.StartUnixNs = s.start.UnixNano()
	}
	for i, b := range s.bytes {
		out.Bps[i] = float64(b) * 8 / s.width.Seconds()
	}
	return out
}

// Settle returns how long after at (unix ns) the goodput kept to limit
// bit/s: from the start of the first bucket from which the bytes of every
// whole bucket ending by until (unix ns) conform to a token bucket of rate
// limit (a policer's test: jitter that moves bytes into the next bucket
// conforms, a rate over the limit does not), to at; 0 when that is the
// first bucket that starts after at. The token bucket saves at most one
// bucket's worth and starts with burst of the limit: what a sender's
// pacer may legitimately hold when the check starts (transport.PacingBurst
// for this transport; 0 for a bucket that starts empty). ok is false when
// no bucket lies between at and until or none conforms.
func (s *Series) Settle(at, until int64, limit float64, burst time.Duration) (d time.Duration, ok bool) {
	return s.SettleLate(at, until, limit, burst, 0)
}

// SettleLate is Settle for a receiver's series: bytes its own scheduling
// held back for up to late arrive together afterwards, so the token
// bucket saves up to late's worth more than one bucket. A stalled and
// then catching-up receiver conforms; a sender over the limit for longer
// than late does not.
func (s *Series) SettleLate(at, until int64, limit float64, burst, late time.Duration) (d time.Duration, ok bool) {
	w := int64(s.WidthSeconds * 1e9)
	if w <= 0 {
		return 0, false
	}
	first := max(0, int((at-s.StartUnixNs+w-1)/w)) // first bucket starting at or after at
	last := min(len(s.Bps), int((until-s.StartUnixNs)/w)) - 1
	quantum := limit * s.WidthSeconds // bits a bucket may carry
	depth := 2*quantum + limit*late.Seconds()
	conforms := func(k int) bool {
		tokens := limit * burst.Seconds() // what earlier buckets left, up to one more bucket (and late)
		for _, bps := range s.Bps[k : last+1] {
			tokens = min(depth, tokens+quantum) - bps*s.WidthSeconds
			if tokens < -1e-9*quantum {
				return false
			}
		}
		return true
	}
	for k := first; k <= last; k++ {
		if conforms(k) {
			return time.Duration(s.StartUnixNs + int64(k)*w - at), true
		}
	}
	return 0, false
}

// Mean returns the mean goodput of the whole buckets between from and
// until (unix ns).
func (s *Series) Mean(from, until int64) float64 {
	w := int64(s.WidthSeconds * 1e9)
	if w <= 0 {
		return 0
	}
	first := max(0, int((from-s.StartUnixNs+w-1)/w))
	last := min(len(s.Bps), int((until-s.StartUnixNs)/w)) - 1
	if last < first {
		return 0
	}
	sum := 0.0
	for _, b := range s.Bps[first : last+1] {
		sum += b
	}
	return sum / float64(last-first+1)
}
