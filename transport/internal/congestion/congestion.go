// Package congestion holds the per-path congestion controllers, the RTT
// estimator and the pacer of the transport.
//
// A controller implements SendAlgorithm (in the spirit of quic-go's
// congestion.SendAlgorithm) and reads time only from an injected Clock, so
// tests drive it deterministically. The default controller, DelayAIMD, is
// a window-based AIMD that treats queueing delay above a target and ECN
// marks as congestion, and isolated losses as random loss to be resent, not
// as congestion: on a lossy fabric halving the window on every loss would
// empty the pipe. Loss counts as congestion only when it comes with delay
// or in bursts.
package congestion

import (
	"time"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// Clock gives the current time.
type Clock interface {
	Now() time.Time
}

// SystemClock reads the real time.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// SendAlgorithm is a per-path congestion controller.
type SendAlgorithm interface {
	// OnPacketSent records bytes sent; bytesInFlight is before the send.
	OnPacketSent(now time.Time, bytesInFlight, bytes protocol.ByteCount)
	// OnPacketAcked records newly acknowledged bytes.
	OnPacketAcked(now time.Time, acked, priorInFlight protocol.ByteCount)
	// OnPacketLost records a packet inferred lost from a gap.
	OnPacketLost(now time.Time, lost, priorInFlight protocol.ByteCount)
	// OnECN records newly CE-marked packets echoed by the receiver.
	OnECN(now time.Time, marked int)
	// OnRetransmissionTimeout records a retransmission timeout.
	OnRetransmissionTimeout(now time.Time)
	// OnSpuriousTimeout reports that the last timeout was spurious (a
	// packet it declared lost was acknowledged): the window is restored.
	OnSpuriousTimeout(now time.Time)
	// CanSend reports whether the window allows another packet.
	CanSend(bytesInFlight protocol.ByteCount) bool
	// CongestionWindow returns the current window.
	CongestionWindow() protocol.ByteCount
	// PacingRate returns the rate at which the path should send.
	PacingRate() protocol.Rate
	// InSlowStart reports whether the controller is still probing exponentially.
	InSlowStart() bool
}
