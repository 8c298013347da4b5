package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"sync"

	"github.com/multiplane/multiplane/transport"
)

// mpTransport adapts package transport: mode multipath (sprayed over every
// plane, selective resend) or gbn (its go-back-N single-path baseline).
// Both sides bind --bind[i]:--port on each plane (the client's -q
// connections share one endpoint); the client dials --peer[i]:--port.
type mpTransport struct {
	mode transport.Mode

	mu     sync.Mutex
	ts     []*transport.Transport
	client *transport.Transport
	conns  []*transport.Conn
	// closedIO is the I/O counters of the endpoints Close closed (a server
	// closes its listener before it reports).
	closedIO *IOStats
	// egress counts what the client endpoint's pacers release (--series).
	egress *seriesMeter
	// slab is send memory not yet handed to a connection (sendSlots).
	slab []byte
}

// sendSlots returns window send slots of size bytes for a client
// connection, cut from one slab for all of the run's connections (with
// transparent huge pages where the kernel offers them), each page already
// written: at -q 4000 the 262 MB of first messages, allocated and first
// written inside the timed run, took its first 0.5 s in page faults while
// the transport's workers waited for the CPUs, and touching them 4 KiB at
// a time before the run added 0.7 s to the dials.
func (t *mpTransport) sendSlots(cfg *Config, window, size int) [][]byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.slab) < window*size {
		t.slab = make([]byte, max(1, cfg.Conns)*window*size)
		adviseHugePages(t.slab)
		page := os.Getpagesize()
		for k := 0; k < len(t.slab); k += page {
			t.slab[k] = 1
		}
	}
	out := make([][]byte, window)
	for i := range out {
		out[i], t.slab = t.slab[:size:size], t.slab[size:]
	}
	return out
}

// egressMeter implements egressRecorder.
func (t *mpTransport) egressMeter() *seriesMeter {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.egress
}

// maxWindow is the most messages a connection keeps in flight
// (SendAsync): enough to fill the planes. With many connections the window
// shrinks so that all of them together hold about inflightBudget (at least
// one message each): memory is about max(inflightBudget, q × size) however
// large -q is. The budget is what the fabric can hold many times over, not
// more: every slot is filled (and its memory first touched) before the
// first send, and with 256 MiB 8 clients of 50 connections spent their
// first 2.5 s in page faults and copies while the transport's ACKs waited
// for the CPU.
const (
	maxWindow      = 64
	inflightBudget = 32 << 20
	connBudget     = 32 << 20 // per connection, under the transport's 64 MiB SendBuffer
)

// windowFor is the per-connection window for conns connections of size.
func windowFor(conns, size int) int {
	per := min(connBudget, inflightBudget/max(1, conns))
	return max(1, min(maxWindow, per/max(1, size)))
}

func newTransportMode(m Mode) (Transport, error) {
	mode := transport.ModeMultipath
	if m == ModeGBN {
		mode = transport.ModeGBN
	}
	return &mpTransport{mode: mode}, nil
}

func (t *mpTransport) config(cfg *Config, port int) (transport.Config, error) {
	mtu := cfg.MTU
	if mtu == 0 {
		mtu = 1500
	}
	tc := transport.Config{Mode: t.mode, MaxDatagramSize: transport.ByteCount(mtu - 28), Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if cfg.Poll != "" {
		pm, err := transport.ParsePollMode(cfg.Poll)
		if err != nil {
			return tc, fmt.Errorf("%w: --poll: %v", ErrUsage, err)
		}
		tc.PollMode = pm
	}
	for _, a := range cfg.Bind {
		tc.Local = append(tc.Local, netip.AddrPortFrom(a, uint16(port)))
	}
	if cfg.Role == RoleServer {
		tc.IngressBudget = transport.Rate(cfg.IngressBudget / 8)
	}
	if cfg.Series > 0 && cfg.Role == RoleClient {
		es := &seriesMeter{width: cfg.Series}
		t.mu.Lock()
		t.egress = es
		t.mu.Unlock()
		tc.OnEgress = es.add
	}
	return tc, nil
}

func (t *mpTransport) listen(cfg *Config, tc transport.Config) (*transport.Transport, error) {
	tr, err := transport.Listen(tc)
	if err != nil {
		return nil, err
	}
	if cfg.OnTransport != nil {
		cfg.OnTransport(tr)
	}
	t.mu.Lock()
	t.ts = append(t.ts, tr)
	t.mu.Unlock()
	return tr, nil
}

func (t *mpTransport) track(c *transport.Conn) {
	t.mu.Lock()
	t.conns = append(t.conns, c)
	t.mu.Unlock()
}

func (t *mpTransport) Listen(ctx context.Context, cfg *Config) (Listener, error) {
	tc, err := t.config(cfg, cfg.Port)
	if err != nil {
		return nil, err
	}
	// Clients dial in parallel, several at once in incast: a connection
	// refused for a full backlog waits for its dialer's next INIT.
	tc.AcceptBacklog = MaxConns
	tr, err := t.listen(cfg, tc)
	if err != nil {
		return nil, fmt.Errorf("bench: transport listen: %w", err)
	}
	return &mpListener{t: t, tr: tr}, nil
}

func (t *mpTransport) Dial(ctx context.Context, cfg *Config) (Conn, error) {
	tr, err := t.clientEndpoint(cfg)
	if err != nil {
		return nil, err
	}
	peers := make([]netip.AddrPort, len(cfg.Peer))
	for i, a := range cfg.Peer {
		peers[i] = netip.AddrPortFrom(a, uint16(cfg.Port))
	}
	c, err := tr.Dial(ctx, peers)
	if err != nil {
		return nil, err
	}
	t.track(c)
	m := newMPConn(c, windowFor(cfg.Conns, cfg.Size))
	m.ring = t.sendSlots(cfg, len(m.ring), cfg.Size)
	return m, nil
}

// clientEndpoint is the client's one transport, shared by its -q
// connections. It binds --bind[i]:--port, like the server: the userspace
// fabric delivers every datagram to that port.
func (t *mpTransport) clientEndpoint(cfg *Config) (*transport.Transport, error) {
	t.mu.Lock()
	if t.client != nil {
		defer t.mu.Unlock()
		return t.client, nil
	}
	t.mu.Unlock()
	tc, err := t.config(cfg, cfg.Port)
	if err != nil {
		return nil, err
	}
	tr, err := t.listen(cfg, tc)
	if err != nil {
		return nil, fmt.Errorf("bench: transport bind: %w", err)
	}
	t.mu.Lock()
	t.client = tr
	t.mu.Unlock()
	return tr, nil
}

// SetEgressCap implements egressCapper: the client endpoint's per
// connection egress cap, in bit/s (0: none).
func (t *mpTransport) SetEgressCap(bps float64) error {
	t.mu.Lock()
	tr := t.client
	t.mu.Unlock()
	if tr == nil {
		return errors.New("bench: no client endpoint to cap")
	}
	return tr.SetRates(transport.Rate(bps/8), 0, nil)
}

// Close closes the transports the mode opened.
func (t *mpTransport) Close() error {
	t.mu.Lock()
	ts := t.ts
	t.ts, t.client = nil, nil
	if len(ts) > 0 {
		t.closedIO = ioStats(ts)
	}
	t.mu.Unlock()
	var errs []error
	for _, tr := range ts {
		errs = append(errs, tr.Close())
	}
	return errors.Join(errs...)
}

// Begin and End report retransmits and per-plane bytes from the
// connections' own counters (bytes sent per plane on the client, payload
// bytes received per plane on the server), and the endpoints' I/O counters.
func (t *mpTransport) Begin(cfg *Config) {}

func (t *mpTransport) End(cfg *Config) Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	var rt int64
	rec := &Recovery{}
	var det transport.Detections
	planes := make([]int64, len(cfg.Bind))
	for _, c := range t.conns {
		st := c.Stats()
		rt += int64(st.Retransmits)
		for _, p := range st.Paths {
			rec.PacketsLost += p.PacketsLost
			rec.SpuriousLosses += p.SpuriousLosses
			rec.Timeouts += p.Timeouts
			rec.SpuriousTimeouts += p.SpuriousTimeouts
			rec.Stalls += p.Stalls
			det.Add(p.Detections)
		}
		for _, p := range st.Planes {
			if p.Plane < 0 || p.Plane >= len(planes) {
				continue
			}
			if cfg.Role == RoleServer {
				planes[p.Plane] += int64(p.BytesReceived)
			} else {
				planes[p.Plane] += int64(p.BytesSent)
			}
		}
	}
	io := t.closedIO
	if len(t.ts) > 0 {
		io = ioStats(t.ts)
	}
	rec.Detectors = map[string]DetectorCount{
		"gap": DetectorCount(det.Gap), "time": DetectorCount(det.Time), "shared": DetectorCount(det.Shared),
		"timeout": DetectorCount(det.Timeout), "removal": DetectorCount(det.Removal),
	}
	return Stats{Retransmits: &rt, PlaneBytes: planes, IO: io, Recovery: rec}
}

func ioStats(ts []*transport.Transport) *IOStats {
	var txp, txb, rxp, rxb, drops uint64
	for _, tr := range ts {
		for _, p := range tr.Stats().Planes {
			txp, txb, rxp, rxb = txp+p.TxPackets, txb+p.TxBatches, rxp+p.RxPackets, rxb+p.RxBatches
			drops += p.KernelDrops
		}
	}
	per := func(n, calls uint64) float64 { return float64(n) / float64(max(calls, 1)) }
	return &IOStats{TxPerCall: per(txp, txb), RxPerCall: per(rxp, rxb), SocketDrops: drops, TxDatagrams: txp, RxDatagrams: rxp}
}

type mpListener struct {
	t  *mpTransport
	tr *transport.Transport
}

func (l *mpListener) Accept(ctx context.Context) (Conn, error) {
	c, err := l.tr.Accept(ctx)
	if err != nil {
		return nil, err
	}
	l.t.track(c)
	return newMPConn(c, 2), nil // the server sends progress reports and a result
}

func (l *mpListener) Close() error { return l.t.Close() }

// mpConn keeps up to window messages in flight with SendAsync; each
// in-flight message owns one slot of a buffer ring (SendAsync is zero copy).
// Recv may run beside Send (it does not wait for sends in flight: the
// server's result says what arrived); Send is for one goroutine at a time.
type mpConn struct {
	c        *transport.Conn
	received []byte // the last message Recv returned
	ring     [][]byte
	comps    []*transport.Completion
	next     int
}

// newMPConn returns a connection with window slots, each allocated on
// first use.
func newMPConn(c *transport.Conn, window int) *mpConn {
	return &mpConn{c: c, comps: make([]*transport.Completion, window), ring: make([][]byte, window)}
}

func (m *mpConn) Send(ctx context.Context, msg []byte) error {
	return m.SendFill(ctx, len(msg), func(b []byte) { copy(b, msg) })
}

// SendFill sends a message of n bytes that fill writes straight into its
// send slot (no staging copy).
func (m *mpConn) SendFill(ctx context.Context, n int, fill func([]byte)) error {
	i := m.next
	m.next = (m.next + 1) % len(m.ring)
	if comp := m.comps[i]; comp != nil {
		if err := comp.Wait(ctx); err != nil && !errors.Is(err, transport.ErrWithdrawn) {
			return err
		}
		m.comps[i] = nil
	}
	if cap(m.ring[i]) < n {
		m.ring[i] = make([]byte, n)
	}
	buf := m.ring[i][:n]
	fill(buf)
	comp, err := m.c.SendAsync(ctx, buf)
	if err != nil {
		return err
	}
	m.comps[i] = comp
	return nil
}

// Withdraw takes back the queued messages not yet started.
func (m *mpConn) Withdraw() (int, int64) { return m.c.Withdraw() }

func (m *mpConn) Recv(ctx context.Context, buf []byte) ([]byte, error) {
	if cap(buf) > 0 && cap(m.received) > 0 && &buf[:1][0] == &m.received[:1][0] {
		m.c.Recycle(m.received) // handed back: no allocation per message
	}
	m.received = nil
	msg, err := m.c.Recv(ctx)
	m.received = msg
	if errors.Is(err, transport.ErrPeerClosed) {
		return nil, io.EOF
	}
	return msg, err
}

// RemoteAddr is the peer's address on its first plane.
func (m *mpConn) RemoteAddr() string {
	for _, a := range m.c.RemoteAddrs() {
		if a.IsValid() {
			return a.String()
		}
	}
	return "unknown"
}

func (m *mpConn) Close() error { return m.c.Close() }
