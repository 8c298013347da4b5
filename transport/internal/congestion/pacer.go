package congestion

import (
	"sync"
	"time"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// Pacer is a token bucket: it spreads a path's packets at a rate, allowing
// bursts of up to a burst of bytes (which covers the sender's wake-up
// jitter). It is safe for concurrent use: connections to one peer share it.
type Pacer struct {
	mu     sync.Mutex
	tokens protocol.ByteCount
	last   time.Time
	burst  protocol.ByteCount // caps the accumulated tokens
}

// NewPacer returns a pacer with a full bucket.
func NewPacer(burst protocol.ByteCount) *Pacer { return &Pacer{tokens: burst, burst: burst} }

// SetBurst sets the cap of the accumulated tokens.
func (p *Pacer) SetBurst(b protocol.ByteCount) {
	p.mu.Lock()
	p.burst = b
	p.mu.Unlock()
}

func (p *Pacer) refill(now time.Time, rate protocol.Rate) {
	if rate == 0 {
		p.tokens = p.burst
		p.last = now
		return
	}
	if p.last.IsZero() {
		p.last = now
	}
	if el := now.Sub(p.last); el > 0 {
		p.tokens += rate.BytesIn(el)
		if p.tokens > p.burst {
			p.tokens = p.burst
		}
		p.last = now
	}
}

// Budget returns how many bytes may be sent at now at rate.
func (p *Pacer) Budget(now time.Time, rate protocol.Rate) protocol.ByteCount {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refill(now, rate)
	return p.tokens
}

// OnSent consumes tokens.
func (p *Pacer) OnSent(n protocol.ByteCount) {
	p.mu.Lock()
	p.tokens -= n
	p.mu.Unlock()
}

// TimeUntil returns how long until n bytes of tokens are available at rate.
func (p *Pacer) TimeUntil(now time.Time, rate protocol.Rate, n protocol.ByteCount) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refill(now, rate)
	if p.tokens >= n || rate == 0 {
		return 0
	}
	return rate.TimeFor(n - p.tokens)
}
