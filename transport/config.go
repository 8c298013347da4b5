package transport

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/multiplane/multiplane/transport/internal/congestion"
	"github.com/multiplane/multiplane/transport/internal/ioengine"
	"github.com/multiplane/multiplane/transport/internal/protocol"
	"github.com/multiplane/multiplane/transport/internal/wire"
)

// Typed units, shared with the internal packages.
type (
	// ByteCount is a number of bytes.
	ByteCount = protocol.ByteCount
	// Rate is a rate in bytes per second.
	Rate = protocol.Rate
)

// Rates.
const (
	Mbps = protocol.Mbps
	Gbps = protocol.Gbps
)

// PacingBurst is how much of its rate a pacer (a path's or the egress
// cap's) may save up and release at once: what a sender that was not
// scheduled for a while sends on top of its rate when it runs again.
const PacingBurst = 1500 * time.Microsecond

// Mode is a connection's reliability scheme.
type Mode = protocol.Mode

// Modes.
const (
	// ModeMultipath sprays over all paths with per-path SACK and selective
	// resend (the default).
	ModeMultipath = protocol.ModeMultipath
	// ModeGBN is the RoCEv2-like baseline: one path, go-back-N, no SACK.
	ModeGBN = protocol.ModeGBN
)

// ParseMode parses "multipath" or "gbn".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "multipath":
		return ModeMultipath, nil
	case "gbn":
		return ModeGBN, nil
	}
	return 0, fmt.Errorf("transport: unknown mode %q (want multipath or gbn)", s)
}

// PollMode is how the I/O loops wait for datagrams.
type PollMode = ioengine.PollMode

// Poll modes.
const (
	// PollAdaptive spins briefly after traffic, then blocks (the default).
	PollAdaptive = ioengine.PollAdaptive
	// PollBusy never blocks: lowest latency, one core per transport (one
	// goroutine polls every plane).
	PollBusy = ioengine.PollBusy
	// PollBlocking always blocks in the netpoller.
	PollBlocking = ioengine.PollBlocking
)

// ParsePollMode parses "adaptive", "busy" or "blocking".
func ParsePollMode(s string) (PollMode, error) { return ioengine.ParsePollMode(s) }

// Errors.
var (
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("transport: closed")
	// ErrPeerClosed is returned when the peer closed the connection.
	ErrPeerClosed = errors.New("transport: peer closed the connection")
	// ErrPeerUnreachable is returned when the peer was heard on none of
	// its connections for PeerTimeout: data that was not acknowledged was
	// not delivered.
	ErrPeerUnreachable = errors.New("transport: peer unreachable")
	// ErrHandshakeTimeout is returned by Dial when the peer does not answer.
	ErrHandshakeTimeout = errors.New("transport: handshake timed out")
	// ErrWithdrawn completes a message that Withdraw took back before any
	// of it was sent: the peer never sees it.
	ErrWithdrawn = errors.New("transport: message withdrawn before it was sent")
	// ErrMessageTooLarge is returned by Send for a message over MaxMessageSize.
	ErrMessageTooLarge = errors.New("transport: message too large")
	// ErrProtocol is returned when the peer broke the protocol (for example
	// data that cannot be placed); the connection is closed.
	ErrProtocol = errors.New("transport: protocol violation by the peer")
	// ErrInvalidPathSet is returned by SetPathSet for an unusable path set.
	ErrInvalidPathSet = errors.New("transport: invalid path set")
)

// PlanePaths configures the paths of one plane in a PathSet.
type PlanePaths struct {
	// Plane is the plane index (its position in Config.Local).
	Plane int
	// Weight is the plane's share of the traffic (relative; 0 disables it).
	Weight float64
	// Entropy is the number of paths (UDP source ports) used on the plane
	// (default 1, at most 64).
	Entropy int
}

// PathSet is the set of planes a connection sprays over, with weights.
type PathSet struct {
	Planes []PlanePaths
	// Generation is the control plane's version of the set (informational).
	Generation uint64
}

// DefaultPathSet uses every plane with weight 1 and one path each.
func DefaultPathSet(planes int) PathSet {
	ps := PathSet{Planes: make([]PlanePaths, planes)}
	for i := range ps.Planes {
		ps.Planes[i] = PlanePaths{Plane: i, Weight: 1, Entropy: 1}
	}
	return ps
}

// MaxPlanes bounds the number of planes of a Transport.
const MaxPlanes = 64

// MaxEntropy bounds PlanePaths.Entropy.
const MaxEntropy = 64

// DataOverhead is the bytes of each data datagram's UDP payload that are
// not message bytes (header and CRC): a datagram of MaxDatagramSize bytes
// carries MaxDatagramSize - DataOverhead bytes of a message.
const DataOverhead = wire.DataOverhead

func (ps PathSet) validate(planes int) error {
	if len(ps.Planes) == 0 {
		return fmt.Errorf("%w: no planes", ErrInvalidPathSet)
	}
	seen := map[int]bool{}
	total := 0.0
	for _, p := range ps.Planes {
		if p.Plane < 0 || p.Plane >= planes {
			return fmt.Errorf("%w: plane %d out of range (0..%d)", ErrInvalidPathSet, p.Plane, planes-1)
		}
		if seen[p.Plane] {
			return fmt.Errorf("%w: plane %d listed twice", ErrInvalidPathSet, p.Plane)
		}
		seen[p.Plane] = true
		if p.Weight < 0 || p.Entropy < 0 || p.Entropy > MaxEntropy {
			return fmt.Errorf("%w: plane %d weight %v entropy %d", ErrInvalidPathSet, p.Plane, p.Weight, p.Entropy)
		}
		total += p.Weight
	}
	if total <= 0 {
		return fmt.Errorf("%w: all weights are zero", ErrInvalidPathSet)
	}
	return nil
}

// Config configures a Transport. Zero fields take the documented defaults.
type Config struct {
	// Local is the local UDP address of each plane, in plane order. The
	// peer's per-plane addresses passed to Dial use the same order.
	Local []netip.AddrPort
	// Mode is the reliability scheme of dialed connections (default
	// multipath); accepted connections take the dialer's.
	Mode Mode
	// PathSet is the initial path set (default DefaultPathSet).
	PathSet *PathSet
	// MaxDatagramSize is the largest UDP payload sent and received: 1472
	// for an MTU of 1500 (default), 8972 for 9000. Each end announces it in
	// the handshake and a connection sends datagrams of at most the smaller
	// of the two (ConnStats.DatagramSize); the transport warns, once per
	// peer, when they differ.
	MaxDatagramSize ByteCount
	// PollMode selects how the I/O loops wait (default adaptive).
	PollMode PollMode
	// BatchSize is the most datagrams per system call (default 64).
	BatchSize int
	// NoGSO turns off UDP segmentation offload for sends (on by default on
	// Linux; it turns itself off where the kernel refuses it).
	NoGSO bool
	// SocketBuffer is SO_RCVBUF/SO_SNDBUF (default 8 MiB).
	SocketBuffer int
	// SendBuffer is the unacknowledged bytes a connection holds before
	// Send blocks (default 64 MiB).
	SendBuffer ByteCount
	// ReceiveWindow is the flow-control credit: bytes received and not
	// yet taken by Recv (default 64 MiB).
	ReceiveWindow ByteCount
	// MaxMessageSize bounds a message (default 1 GiB, at most 4 GiB-1).
	MaxMessageSize ByteCount
	// IngressBudget is the receive rate shared among the connections
	// sending to this transport: each connection that sent data in the last
	// 100 ms gets an equal grant, carried in every ACK (0: unlimited).
	IngressBudget Rate
	// EgressCap caps each connection's send rate (0: unlimited).
	EgressCap Rate
	// TargetQueueDelay is the queueing delay above a path's minimum RTT
	// that congestion control treats as congestion (default 2 ms: a standing
	// queue that rides out scheduling stalls of the endpoints, well under
	// the 5 ms buffers of the benchmark fabrics).
	TargetQueueDelay time.Duration
	// MinRTO is the smallest retransmission timeout (default 10 ms).
	MinRTO time.Duration
	// ReorderThreshold is how many later packets on a path must arrive
	// before a missing one is declared lost (default 3; 1 = any gap).
	ReorderThreshold int
	// RetireAfter is the number of consecutive timeouts that retire a
	// path (default 2); a retired path gets one probe per ProbeInterval.
	RetireAfter int
	// ProbeInterval is how often a retired path is probed (default 10 ms).
	ProbeInterval time.Duration
	// PeerTimeout fails the connections to a peer that was heard on none
	// of them for this long (default 5 s); a connection that hears nothing
	// itself while its peer is heard on others stays up. Keepalives are
	// sent at a quarter of it.
	PeerTimeout time.Duration
	// HandshakeTimeout bounds Dial (default 5 s).
	HandshakeTimeout time.Duration
	// AcceptBacklog is the number of connections waiting for Accept
	// (default 64).
	AcceptBacklog int
	// Logger receives diagnostics (default: discard).
	Logger *slog.Logger
	// OnEgress, if set, is called for every data datagram a connection's
	// pacers release, with the time they released it and its UDP payload
	// size: what rate caps let out, seen where they are enforced. It is
	// called with the connection's lock held and must not block.
	OnEgress func(at time.Time, size int)

	clock congestion.Clock
	// connIDs picks connection ids (default: random); tests force collisions.
	connIDs func() protocol.ConnectionID
}

func (c *Config) connID() protocol.ConnectionID {
	if c.connIDs != nil {
		return c.connIDs()
	}
	return protocol.ConnectionID(rand.Uint32())
}

func (c Config) withDefaults() (Config, error) {
	if len(c.Local) == 0 {
		return c, errors.New("transport: Config.Local needs at least one plane address")
	}
	if len(c.Local) > MaxPlanes {
		return c, fmt.Errorf("transport: %d planes, at most %d", len(c.Local), MaxPlanes)
	}
	if c.Mode == 0 {
		c.Mode = ModeMultipath
	}
	if c.Mode != ModeMultipath && c.Mode != ModeGBN {
		return c, fmt.Errorf("transport: invalid mode %v", c.Mode)
	}
	if c.PathSet == nil {
		ps := DefaultPathSet(len(c.Local))
		c.PathSet = &ps
	}
	if err := c.PathSet.validate(len(c.Local)); err != nil {
		return c, err
	}
	if c.MaxDatagramSize == 0 {
		c.MaxDatagramSize = protocol.DefaultMaxDatagramSize
	}
	if c.MaxDatagramSize < protocol.MinDatagramSize || c.MaxDatagramSize > protocol.MaxDatagramSize {
		return c, fmt.Errorf("transport: MaxDatagramSize %d outside %d..%d", c.MaxDatagramSize, protocol.MinDatagramSize, protocol.MaxDatagramSize)
	}
	if c.SendBuffer <= 0 {
		c.SendBuffer = 64 << 20
	}
	if c.ReceiveWindow <= 0 {
		c.ReceiveWindow = 64 << 20
	}
	if c.MaxMessageSize <= 0 {
		c.MaxMessageSize = 1 << 30
	}
	if c.MaxMessageSize > 1<<32-1 {
		c.MaxMessageSize = 1<<32 - 1
	}
	if c.TargetQueueDelay <= 0 {
		c.TargetQueueDelay = 2 * time.Millisecond
	}
	if c.MinRTO <= 0 {
		c.MinRTO = 10 * time.Millisecond
	}
	if c.ReorderThreshold <= 0 {
		c.ReorderThreshold = 3
	}
	if c.RetireAfter <= 0 {
		c.RetireAfter = 2
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = 10 * time.Millisecond
	}
	if c.PeerTimeout <= 0 {
		c.PeerTimeout = 5 * time.Second
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 5 * time.Second
	}
	if c.AcceptBacklog <= 0 {
		c.AcceptBacklog = 64
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.clock == nil {
		c.clock = congestion.SystemClock{}
	}
	return c, nil
}
