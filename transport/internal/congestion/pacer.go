package congestion

import (
	"time"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// Pacer is a token bucket: it spreads a path's packets at a rate, allowing
// bursts of up to Burst bytes (which covers the sender's wake-up jitter).
type Pacer struct {
	tokens protocol.ByteCount
	last   time.Time
	// Burst caps the accumulated tokens.
	Burst protocol.ByteCount
}

// NewPacer returns a pacer with a full bucket.
func NewPacer(burst protocol.ByteCount) *Pacer { return &Pacer{tokens: burst, Burst: burst} }

func (p *Pacer) refill(now time.Time, rate protocol.Rate) {
	if rate == 0 {
		p.tokens = p.Burst
		p.last = now
		return
	}
	if p.last.IsZero() {
		p.last = now
	}
	if el := now.Sub(p.last); el > 0 {
		p.tokens += rate.BytesIn(el)
		if p.tokens > p.Burst {
			p.tokens = p.Burst
		}
		p.last = now
	}
}

// Budget returns how many bytes may be sent at now at rate.
func (p *Pacer) Budget(now time.Time, rate protocol.Rate) protocol.ByteCount {
	p.refill(now, rate)
	return p.tokens
}

// OnSent consumes tokens.
func (p *Pacer) OnSent(n protocol.ByteCount) { p.tokens -= n }

// TimeUntil returns how long until n bytes of tokens are available at rate.
func (p *Pacer) TimeUntil(now time.Time, rate protocol.Rate, n protocol.ByteCount) time.Duration {
	p.refill(now, rate)
	if p.tokens >= n || rate == 0 {
		return 0
	}
	return rate.TimeFor(n - p.tokens)
}
