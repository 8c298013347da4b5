package congestion

import (
	"time"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// DelayAIMDConfig configures DelayAIMD.
type DelayAIMDConfig struct {
	// MSS is the payload of a full packet.
	MSS protocol.ByteCount
	// InitialWindow, MinWindow and MaxWindow bound the window, in bytes.
	InitialWindow, MinWindow, MaxWindow protocol.ByteCount
	// TargetQueueDelay is the queueing delay above the path's minimum RTT
	// that counts as congestion.
	TargetQueueDelay time.Duration
	// LossBurst is the fraction of packets lost, in one round (with at
	// least 3 losses) or smoothed over rounds, above which loss counts as
	// congestion even without delay: tail drops, or a path much lossier
	// than the rest, which then carries less. 1% random loss never trips it.
	LossBurst float64
	// HostDelay is what the hosts normally add to a round trip (the
	// receiver's ACK delay, a poll loop's turn): pacing spreads a window
	// over the smoothed RTT, but over at most the fabric's share plus this.
	HostDelay time.Duration
}

// DefaultDelayAIMDConfig returns defaults for a path with the given MSS.
func DefaultDelayAIMDConfig(mss protocol.ByteCount) DelayAIMDConfig {
	return DelayAIMDConfig{
		MSS:              mss,
		InitialWindow:    32 * mss,
		MinWindow:        2 * mss,
		MaxWindow:        32 << 20,
		TargetQueueDelay: 1 * time.Millisecond,
		LossBurst:        0.1,
		HostDelay:        time.Millisecond,
	}
}

// DelayAIMD is a per-path window controller: exponential start, additive
// increase of one MSS per round while the round's minimum RTT stays under
// min RTT + target, multiplicative decrease proportional to the excess
// delay (at most once per round), a 0.8× decrease on ECN marks (once per
// round), and for loss a decrease only when the loss comes with delay or
// in a burst. A timeout collapses the window to MinWindow.
type DelayAIMD struct {
	cfg       DelayAIMDConfig
	rtt       *RTTStats
	cwnd      protocol.ByteCount
	ssthresh  protocol.ByteCount
	lastCut   time.Time
	roundEnd  time.Time
	roundAck  int
	roundLoss int
	lossRate  float64
	// window before the last timeout, restored if it proves spurious
	preRTOCwnd, preRTOSsthresh protocol.ByteCount
}

var _ SendAlgorithm = (*DelayAIMD)(nil)

// NewDelayAIMD returns a controller reading RTT samples from rtt.
func NewDelayAIMD(cfg DelayAIMDConfig, rtt *RTTStats) *DelayAIMD {
	if cfg.MinWindow < cfg.MSS {
		cfg.MinWindow = cfg.MSS
	}
	if cfg.InitialWindow < cfg.MinWindow {
		cfg.InitialWindow = cfg.MinWindow
	}
	return &DelayAIMD{cfg: cfg, rtt: rtt, cwnd: cfg.InitialWindow, ssthresh: cfg.MaxWindow}
}

// OnPacketSent implements SendAlgorithm.
func (c *DelayAIMD) OnPacketSent(time.Time, protocol.ByteCount, protocol.ByteCount) {}

// target is the RTT above which the path counts as congested: the minimum
// RTT, plus TargetQueueDelay, plus the serialization time of a few packets
// at the path's current rate (so slow paths, where one packet takes a
// sizeable part of the target, are not starved; Swift scales its target
// the same way).
func (c *DelayAIMD) target() time.Duration {
	perPkt := time.Duration(float64(c.rtt.Smoothed()) * float64(c.cfg.MSS) / float64(c.cwnd))
	return c.rtt.Min() + c.cfg.TargetQueueDelay + 3*perPkt
}

func (c *DelayAIMD) newRound(now time.Time) {
	if now.Before(c.roundEnd) {
		return
	}
	if n := c.roundAck + c.roundLoss; n > 0 {
		// Loss rate over the last rounds (EWMA, 1/8 per round).
		c.lossRate += (float64(c.roundLoss)/float64(n) - c.lossRate) / 8
	}
	c.roundEnd = now.Add(c.rtt.Smoothed())
	c.roundAck, c.roundLoss = 0, 0
}

// LossRate returns the path's smoothed loss rate.
func (c *DelayAIMD) LossRate() float64 { return c.lossRate }

func (c *DelayAIMD) canCut(now time.Time) bool {
	return now.Sub(c.lastCut) >= c.rtt.Smoothed()
}

func (c *DelayAIMD) cut(now time.Time, factor float64) {
	w := protocol.ByteCount(float64(c.cwnd) * factor)
	if w < c.cfg.MinWindow {
		w = c.cfg.MinWindow
	}
	c.cwnd = w
	c.ssthresh = w
	c.lastCut = now
}

// OnPacketAcked implements SendAlgorithm.
func (c *DelayAIMD) OnPacketAcked(now time.Time, acked, priorInFlight protocol.ByteCount) {
	c.newRound(now)
	c.roundAck += max(1, int(acked/c.cfg.MSS)) // packets, not ACK frames
	if c.rtt.HasSample() {
		if c.InSlowStart() && c.rtt.Latest() > c.target() {
			c.ssthresh = c.cwnd // leave slow start on the first sign of a queue
		}
		if rm := c.rtt.RoundMin(); rm > c.target() {
			if c.canCut(now) {
				excess := float64(rm-c.target()) / float64(rm)
				f := 1 - 0.5*excess
				if f < 0.5 {
					f = 0.5
				}
				c.cut(now, f)
			}
			return
		}
	}
	// Do not grow a window the sender is not using.
	if priorInFlight+2*c.cfg.MSS < c.cwnd/2 {
		return
	}
	if c.cwnd < c.ssthresh {
		c.cwnd += acked
	} else {
		c.cwnd += c.cfg.MSS * acked / c.cwnd
	}
	if c.cwnd > c.cfg.MaxWindow {
		c.cwnd = c.cfg.MaxWindow
	}
}

// OnPacketLost implements SendAlgorithm.
func (c *DelayAIMD) OnPacketLost(now time.Time, lost, priorInFlight protocol.ByteCount) {
	c.newRound(now)
	c.roundLoss++
	// Loss is congestion only when the queue is well past the delay target
	// (the delay rule alone keeps it near the target, so random losses at
	// that equilibrium must not cut), or when losses come in a burst.
	congested := c.rtt.HasSample() && c.rtt.RoundMin() > c.target()+c.cfg.TargetQueueDelay
	n := c.roundAck + c.roundLoss
	if c.roundLoss >= 3 && float64(c.roundLoss) > c.cfg.LossBurst*float64(n) {
		congested = true
	}
	// A path that keeps losing more than LossBurst over several rounds is
	// worse than the others whatever the cause: it carries less.
	if c.lossRate > c.cfg.LossBurst {
		congested = true
	}
	if congested && c.canCut(now) {
		c.cut(now, 0.7)
	}
}

// OnECN implements SendAlgorithm.
func (c *DelayAIMD) OnECN(now time.Time, marked int) {
	if marked > 0 && c.canCut(now) {
		c.cut(now, 0.8)
	}
}

// OnRetransmissionTimeout implements SendAlgorithm.
func (c *DelayAIMD) OnRetransmissionTimeout(now time.Time) {
	if c.cwnd > c.preRTOCwnd || c.cwnd > c.cfg.MinWindow {
		c.preRTOCwnd, c.preRTOSsthresh = c.cwnd, c.ssthresh
	}
	c.ssthresh = c.cwnd / 2
	if c.ssthresh < c.cfg.MinWindow {
		c.ssthresh = c.cfg.MinWindow
	}
	c.cwnd = c.cfg.MinWindow
	c.lastCut = now
}

// OnSpuriousTimeout implements SendAlgorithm.
func (c *DelayAIMD) OnSpuriousTimeout(time.Time) {
	if c.preRTOCwnd > c.cwnd {
		c.cwnd, c.ssthresh = c.preRTOCwnd, c.preRTOSsthresh
	}
	c.preRTOCwnd = 0
}

// CanSend implements SendAlgorithm.
func (c *DelayAIMD) CanSend(inFlight protocol.ByteCount) bool { return inFlight < c.cwnd }

// CongestionWindow implements SendAlgorithm.
func (c *DelayAIMD) CongestionWindow() protocol.ByteCount { return c.cwnd }

// InSlowStart implements SendAlgorithm.
func (c *DelayAIMD) InSlowStart() bool { return c.cwnd < c.ssthresh }

// PacingRate implements SendAlgorithm: the window per smoothed RTT, with
// a gain of 2 in slow start and 1.25 afterwards so pacing never becomes the
// bottleneck.
func (c *DelayAIMD) PacingRate() protocol.Rate {
	gain := 1.25
	if c.InSlowStart() {
		gain = 2
	}
	// Over the smoothed RTT, which includes the hosts' normal delays (so a
	// window is not sent in a burst), but over at most the fabric's share
	// plus HostDelay: a host slow to acknowledge (a busy receiver, a sender
	// that reads its ACKs late) must not slow the pace. Paced by whole
	// samples, 8 hosts of 50 connections into one were paced at about
	// 1 Mbit/s per path: RTT 45-650 ms, of which the fabric's 0.02-0.3 ms.
	rtt := min(c.rtt.Smoothed(), c.rtt.FabricSmoothed()+c.cfg.HostDelay)
	return protocol.Rate(gain * float64(c.cwnd) / rtt.Seconds())
}
