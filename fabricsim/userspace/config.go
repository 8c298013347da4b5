package userspace

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// DefaultPort is the relay port used when Config.Port is 0 (the UET port).
const DefaultPort = 4793

// DefaultMaxDatagram is the largest datagram relayed when
// Config.MaxDatagram is 0 (fits a 9000-byte MTU).
const DefaultMaxDatagram = 9216

// Config describes a fabric.
type Config struct {
	// Hosts is the number of hosts; each has one port on every plane (1..254).
	Hosts int
	// Port is the relay port (default DefaultPort).
	Port int
	// Planes configures each plane; its length is the number of planes (1..255).
	Planes []PlaneConfig
	// MaxDatagram is the largest datagram relayed; larger ones are counted as
	// in-errors and dropped (default DefaultMaxDatagram).
	MaxDatagram int
	// SocketBuffer is SO_RCVBUF/SO_SNDBUF for relay sockets (default 4 MiB;
	// forced past the sysctl limits when running as root).
	SocketBuffer int
	// Logger receives warnings; nil discards.
	Logger *slog.Logger
}

// PlaneConfig describes one plane. Rate, queue and ECN apply to each egress
// port (towards each host) separately.
type PlaneConfig struct {
	// RateBps is the line rate of every egress port in bit/s; 0 = unlimited.
	RateBps int64
	// QueueBytes is the drop-tail limit of each egress queue; 0 picks
	// 5 ms of RateBps, at least 64 KiB.
	QueueBytes int
	// Loss is the probability (0..1) that a datagram is dropped.
	Loss float64
	// Reorder is the probability (0..1) that a datagram is held for
	// ReorderDelay more than the others.
	Reorder float64
	// ReorderDelay is how long a reordered datagram is held (default 1 ms
	// when Reorder > 0).
	ReorderDelay time.Duration
	// Delay is a fixed one-way delay added to every datagram.
	Delay time.Duration
	// ECNThresholdBytes marks ECT datagrams CE when the egress backlog they
	// join exceeds it; 0 disables marking.
	ECNThresholdBytes int
	// Seed seeds the plane's random loss and reordering (0 is a valid seed).
	Seed int64
}

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("userspace: invalid config")

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.Port == 0 {
		out.Port = DefaultPort
	}
	if out.MaxDatagram == 0 {
		out.MaxDatagram = DefaultMaxDatagram
	}
	if out.SocketBuffer == 0 {
		out.SocketBuffer = 4 << 20
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case out.Hosts < 1 || out.Hosts > 254:
		return out, fmt.Errorf("%w: Hosts %d not in 1..254", ErrConfig, out.Hosts)
	case len(out.Planes) < 1 || len(out.Planes) > 255:
		return out, fmt.Errorf("%w: %d planes, want 1..255", ErrConfig, len(out.Planes))
	case out.Port < 1 || out.Port > 65535:
		return out, fmt.Errorf("%w: Port %d", ErrConfig, out.Port)
	case out.MaxDatagram < 64 || out.MaxDatagram > 65535:
		return out, fmt.Errorf("%w: MaxDatagram %d", ErrConfig, out.MaxDatagram)
	}
	out.Planes = append([]PlaneConfig(nil), c.Planes...)
	for i := range out.Planes {
		p := &out.Planes[i]
		switch {
		case p.RateBps < 0:
			return out, fmt.Errorf("%w: plane %d: RateBps %d", ErrConfig, i, p.RateBps)
		case p.Loss < 0 || p.Loss > 1:
			return out, fmt.Errorf("%w: plane %d: Loss %v", ErrConfig, i, p.Loss)
		case p.Reorder < 0 || p.Reorder > 1:
			return out, fmt.Errorf("%w: plane %d: Reorder %v", ErrConfig, i, p.Reorder)
		case p.QueueBytes < 0 || p.ECNThresholdBytes < 0 || p.Delay < 0 || p.ReorderDelay < 0:
			return out, fmt.Errorf("%w: plane %d: negative queue, threshold or delay", ErrConfig, i)
		}
		if p.QueueBytes == 0 {
			p.QueueBytes = defaultQueueBytes(p.RateBps)
		}
		if p.Reorder > 0 && p.ReorderDelay == 0 {
			p.ReorderDelay = time.Millisecond
		}
	}
	return out, nil
}

func defaultQueueBytes(rate int64) int {
	q := int(rate / 8 * 5 / 1000)
	return max(q, 64<<10)
}
