package telemetry

import (
	"flag"
	"fmt"
	"time"
)

// Config tunes the collector. The zero value is usable: every zero field
// takes its default.
type Config struct {
	// SampleInterval is the SAMPLE interval requested for counters (default 1 s).
	SampleInterval time.Duration
	// SilenceTimeout: a stream that brings nothing (no update, heartbeat or
	// sync) for this long is dead and is reconnected (default 3 × SampleInterval).
	SilenceTimeout time.Duration
	// ConnectTimeout bounds connecting and waiting for the first response
	// (default 10 s).
	ConnectTimeout time.Duration
	// KeepaliveTime and KeepaliveTimeout are the gRPC HTTP/2 keepalive ping
	// period and ack timeout (defaults 10 s and 5 s; gRPC allows no less than 10 s).
	KeepaliveTime    time.Duration
	KeepaliveTimeout time.Duration
	// BackoffMin and BackoffMax bound the reconnect delay, which doubles per
	// failed attempt with jitter (defaults 500 ms and 30 s).
	BackoffMin time.Duration
	BackoffMax time.Duration
	// MaxRate is the highest believable per-second counter rate; a larger
	// delta is a discontinuity and gives no rate (default 1e12/s, 8 Tbit/s of octets).
	MaxRate float64
	// Encoding requested: "proto" (default), "json", "json_ietf".
	Encoding string
	// NoTarget leaves the target out of the subscription prefix (by default
	// it is the switch name, which OpenConfig's reference server needs).
	NoTarget bool
}

// Defaults.
const (
	DefaultSampleInterval   = time.Second
	DefaultSilenceIntervals = 3
	DefaultConnectTimeout   = 10 * time.Second
	DefaultKeepaliveTime    = 10 * time.Second
	DefaultKeepaliveTimeout = 5 * time.Second
	DefaultBackoffMin       = 500 * time.Millisecond
	DefaultBackoffMax       = 30 * time.Second
	DefaultMaxRate          = 1e12
)

// RegisterFlags registers the collector's flags (telemetry-...) on fs, with
// the defaults as their values.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.SampleInterval, "telemetry-sample-interval", DefaultSampleInterval, "gNMI SAMPLE interval for counters")
	fs.DurationVar(&c.SilenceTimeout, "telemetry-silence-timeout", 0, "reconnect a stream silent this long (0: 3 × sample interval)")
	fs.DurationVar(&c.ConnectTimeout, "telemetry-connect-timeout", DefaultConnectTimeout, "time to connect and get the first response")
	fs.DurationVar(&c.KeepaliveTime, "telemetry-keepalive-time", DefaultKeepaliveTime, "gRPC keepalive ping period (at least 10s)")
	fs.DurationVar(&c.KeepaliveTimeout, "telemetry-keepalive-timeout", DefaultKeepaliveTimeout, "gRPC keepalive ping ack timeout")
	fs.DurationVar(&c.BackoffMin, "telemetry-backoff-min", DefaultBackoffMin, "first reconnect delay")
	fs.DurationVar(&c.BackoffMax, "telemetry-backoff-max", DefaultBackoffMax, "largest reconnect delay")
	fs.StringVar(&c.Encoding, "telemetry-encoding", "proto", "gNMI encoding requested: proto, json or json_ietf")
	fs.BoolVar(&c.NoTarget, "telemetry-no-target", false, "leave the target out of the subscription prefix")
}

// withDefaults fills zero fields and checks the rest.
func (c Config) withDefaults() (Config, error) {
	if c.SampleInterval <= 0 {
		c.SampleInterval = DefaultSampleInterval
	}
	if c.SilenceTimeout <= 0 {
		c.SilenceTimeout = DefaultSilenceIntervals * c.SampleInterval
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.KeepaliveTime <= 0 {
		c.KeepaliveTime = DefaultKeepaliveTime
	}
	if c.KeepaliveTimeout <= 0 {
		c.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = DefaultBackoffMin
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = DefaultBackoffMax
	}
	if c.BackoffMax < c.BackoffMin {
		return c, fmt.Errorf("%w: backoff max %v < min %v", ErrConfig, c.BackoffMax, c.BackoffMin)
	}
	if c.MaxRate <= 0 {
		c.MaxRate = DefaultMaxRate
	}
	switch c.Encoding {
	case "":
		c.Encoding = "proto"
	case "proto", "json", "json_ietf":
	default:
		return c, fmt.Errorf("%w: encoding %q: want proto, json or json_ietf", ErrConfig, c.Encoding)
	}
	if c.SilenceTimeout < c.SampleInterval {
		return c, fmt.Errorf("%w: silence timeout %v is shorter than the sample interval %v", ErrConfig, c.SilenceTimeout, c.SampleInterval)
	}
	return c, nil
}
