// Package protocol holds the typed units and constants shared by the
// transport's internal packages: byte counts, per-path packet numbers,
// rates, path identifiers and the transport mode.
//
// Every package of the transport speaks in these types instead of bare
// integers, so a rate is never mistaken for a byte count.
package protocol

import (
	"fmt"
	"time"
)

// ByteCount is a number of bytes.
type ByteCount int64

// PacketNumber is a per-path sequence number. Each path numbers its packets
// from 0 in the order they are sent, so a gap on a path means loss.
type PacketNumber uint32

// Rate is a data rate in bytes per second. Zero means unlimited where a cap
// is expected.
type Rate uint64

// Common rates.
const (
	BytePerSecond Rate = 1
	Kbps          Rate = 1000 / 8
	Mbps          Rate = 1000 * Kbps
	Gbps          Rate = 1000 * Mbps
)

// BitsPerSecond returns r in bit/s.
func (r Rate) BitsPerSecond() float64 { return float64(r) * 8 }

// String formats the rate in Mbit/s.
func (r Rate) String() string { return fmt.Sprintf("%.1fMbit/s", r.BitsPerSecond()/1e6) }

// TimeFor returns how long sending n bytes takes at rate r (0 for an
// unlimited rate).
func (r Rate) TimeFor(n ByteCount) time.Duration {
	if r == 0 {
		return 0
	}
	return time.Duration(float64(n) / float64(r) * float64(time.Second))
}

// BytesIn returns how many bytes rate r carries in d.
func (r Rate) BytesIn(d time.Duration) ByteCount {
	return ByteCount(float64(r) * d.Seconds())
}

// RateFrom returns the rate of n bytes per d.
func RateFrom(n ByteCount, d time.Duration) Rate {
	if d <= 0 {
		return 0
	}
	return Rate(float64(n) / d.Seconds())
}

// PathID identifies a path inside a connection: a (local plane port, remote
// plane port, entropy) triple. It is carried in every data packet.
type PathID uint16

// ConnectionID identifies a connection at the receiving endpoint.
type ConnectionID uint32

// Mode selects the reliability scheme of a connection.
type Mode uint8

const (
	// ModeMultipath sprays packets over all paths with per-path sequence
	// numbers, SACK and selective resend.
	ModeMultipath Mode = 1
	// ModeGBN is the RoCEv2-like baseline: a single path, go-back-N, no SACK.
	ModeGBN Mode = 2
)

func (m Mode) String() string {
	switch m {
	case ModeMultipath:
		return "multipath"
	case ModeGBN:
		return "gbn"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Datagram sizes.
const (
	// DefaultMaxDatagramSize is the UDP payload that fits an IPv4 packet in
	// an Ethernet MTU of 1500 bytes.
	DefaultMaxDatagramSize ByteCount = 1472
	// MaxDatagramSize is the largest UDP payload the transport uses (MTU 9000).
	MaxDatagramSize ByteCount = 8972
	// MinDatagramSize is the smallest accepted configuration: its chunks
	// keep a 4 GiB message under 2^24 chunks (DATA's 24-bit chunk index).
	MinDatagramSize ByteCount = 512
)
