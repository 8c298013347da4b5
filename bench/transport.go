package bench

import (
	"context"
	"fmt"
)

// Transport is one mode: how the server listens and the client connects.
type Transport interface {
	// Listen starts accepting connections (server role).
	Listen(ctx context.Context, cfg *Config) (Listener, error)
	// Dial opens one connection to the server (client role). It fails at
	// once if the server is not there; the caller retries.
	Dial(ctx context.Context, cfg *Config) (Conn, error)
}

// Listener accepts connections.
type Listener interface {
	Accept(ctx context.Context) (Conn, error)
	Close() error
}

// Conn carries whole messages both ways. Messages may arrive in any order
// (transports that spray do not keep one); each is delivered once.
type Conn interface {
	// Send sends one message; the transport may keep msg only until Send
	// returns.
	Send(ctx context.Context, msg []byte) error
	// Recv returns the next whole message, in buf when it fits; io.EOF
	// when the peer closed. Passing the previous message back as buf hands
	// it back: the transport may reuse its memory.
	Recv(ctx context.Context, buf []byte) ([]byte, error)
	// RemoteAddr names the peer (the server reports clients by it).
	RemoteAddr() string
	Close() error
}

// Stats is what a transport knows about a whole run (all its connections),
// where Retransmits or PlaneBytes is nil when it does not know.
type Stats struct {
	Retransmits *int64
	PlaneBytes  []int64  // bytes sent (client) or received (server) per plane
	IO          *IOStats // nil when unknown
	Recovery    *Recovery
}

// Recovery is how the connections' senders found their losses (package
// transport's counters, every connection and path together).
type Recovery struct {
	PacketsLost      uint64 `json:"packets_lost"`      // declared lost, by gap or timer
	SpuriousLosses   uint64 `json:"spurious_losses"`   // declared lost, then acknowledged
	Timeouts         uint64 `json:"timeouts"`          // retransmission timeouts
	SpuriousTimeouts uint64 `json:"spurious_timeouts"` // undone by a late acknowledgement
	Stalls           uint64 `json:"stalls"`            // every path timed out at once
	// Detectors splits packets_lost and spurious_losses by what declared
	// the loss.
	Detectors map[string]DetectorCount `json:"detectors,omitempty"`
}

// DetectorCount is what one loss detector declared lost and how much of
// it was acknowledged afterwards.
type DetectorCount struct {
	Lost     uint64 `json:"lost"`
	Spurious uint64 `json:"spurious"`
}

// IOStats are the socket I/O counters of the run's endpoints, all planes
// together: datagrams per send and receive call (batching), and datagrams
// the kernel dropped for lack of socket buffer.
type IOStats struct {
	TxPerCall   float64 `json:"tx_datagrams_per_call"`
	RxPerCall   float64 `json:"rx_datagrams_per_call"`
	SocketDrops uint64  `json:"socket_drops"`
	TxDatagrams uint64  `json:"tx_datagrams"`
	RxDatagrams uint64  `json:"rx_datagrams"`
}

// StatsSource is implemented by transports that can report on a run: Begin
// is called before the first message and End after the last.
type StatsSource interface {
	Begin(cfg *Config)
	End(cfg *Config) Stats
}

// transportFor returns the transport of a mode.
func transportFor(m Mode) (Transport, error) {
	switch m {
	case ModeTCP:
		return &tcpTransport{mptcp: false}, nil
	case ModeMPTCP:
		return &tcpTransport{mptcp: true}, nil
	case ModeMultipath, ModeGBN:
		return newTransportMode(m)
	}
	return nil, fmt.Errorf("%w: mode %q", ErrUsage, m)
}
