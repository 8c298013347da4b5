package transport

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/multiplane/multiplane/transport/internal/ioengine"
	"github.com/multiplane/multiplane/transport/internal/protocol"
	"github.com/multiplane/multiplane/transport/internal/wire"
)

// Transport is an endpoint bound to one UDP address per plane.
type Transport struct {
	cfg    Config
	planes []*plane
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.RWMutex
	conns   map[protocol.ConnectionID]*Conn
	byPeer  map[peerKey]*Conn  // accepted connections by the dialer's instance and id
	peers   map[peerAddr]*peer // remote endpoints by their addresses (see peer.go)
	epoch   time.Time          // origin of peer.heard
	pathSet PathSet
	// instance names this transport in its handshakes (see peerKey).
	instance uint64
	closed   bool

	acceptQ chan *Conn
	bufs    bufferPool
	// sendMsgPool and recvMsgPool recycle the state of completed
	// messages (see sendMsg).
	sendMsgPool, recvMsgPool sync.Pool
	workers                  []*worker // run the connections' send work (sched.go)
	// sendingPeers caches the number of peers that sent data in the last
	// activeWindow, recounted at most every activeRecount.
	sendingPeers atomic.Int64
	sendersAt    atomic.Int64
	recountMu    sync.Mutex
	garbage      atomic.Uint64
	unknown      atomic.Uint64

	// closedRetx are the per-plane retransmits of closed connections, so
	// Stats' counters never go back (guarded by mu).
	closedRetx []uint64

	// Rates, changed at runtime by SetRates (0: unlimited).
	egressCap     atomic.Uint64
	ingressBudget atomic.Uint64
	planeCaps     atomic.Pointer[[]Rate]
}

// peerKey names an accepted connection by the dialer's transport instance
// and connection id: ids are random 32-bit numbers unique only within a
// transport, and the source address differs per plane (relays), so it is
// not part of the key.
type peerKey struct {
	instance uint64
	id       protocol.ConnectionID
}

// plane is one local plane: its receive socket and extra entropy sockets.
type plane struct {
	idx  int
	port *ioengine.Port
	mu   sync.Mutex
	// entropy[e] is the socket for entropy e (entropy 0 is port).
	entropy []*ioengine.Port
	// scratch for the poll goroutine
	ackBlocks []wire.PathAck
	touched   []*Conn
	ackTx     coalescer // ACKs built after a receive batch, sent together
}

// Listen binds a Transport to cfg.Local and starts its poll loops.
func Listen(cfg Config) (*Transport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Transport{
		cfg: cfg, ctx: ctx, cancel: cancel,
		conns:    map[protocol.ConnectionID]*Conn{},
		byPeer:   map[peerKey]*Conn{},
		peers:    map[peerAddr]*peer{},
		epoch:    cfg.clock.Now(),
		pathSet:  clonePathSet(*cfg.PathSet),
		acceptQ:  make(chan *Conn, cfg.AcceptBacklog),
		instance: rand.Uint64(),
	}
	t.sendMsgPool.New = func() any { return new(sendMsg) }
	t.recvMsgPool.New = func() any { return new(recvMsg) }
	t.closedRetx = make([]uint64, len(cfg.Local))
	t.egressCap.Store(uint64(cfg.EgressCap))
	t.ingressBudget.Store(uint64(cfg.IngressBudget))
	for i, a := range cfg.Local {
		port, err := ioengine.Listen(a, t.ioConfig())
		if err != nil {
			t.closePorts()
			cancel()
			return nil, fmt.Errorf("transport: plane %d: %w", i, err)
		}
		t.planes = append(t.planes, &plane{idx: i, port: port, entropy: []*ioengine.Port{port},
			ackTx: coalescer{t: t, msg: "ack send failed"}})
	}
	t.startWorkers()
	if cfg.PollMode == PollBusy {
		t.wg.Add(1)
		go t.busyLoop()
		return t, nil
	}
	for _, pl := range t.planes {
		t.wg.Add(1)
		go t.pollLoop(pl)
	}
	return t, nil
}

func (t *Transport) ioConfig() ioengine.Config {
	return ioengine.Config{
		Mode:         t.cfg.PollMode,
		BatchSize:    t.cfg.BatchSize,
		BufferSize:   int(t.cfg.MaxDatagramSize),
		SocketBuffer: t.cfg.SocketBuffer,
		ECN:          true,
		GSO:          !t.cfg.NoGSO,
		Logger:       t.cfg.Logger,
	}
}

func clonePathSet(ps PathSet) PathSet {
	ps.Planes = append([]PlanePaths(nil), ps.Planes...)
	return ps
}

// LocalAddrs returns the bound address of each plane.
func (t *Transport) LocalAddrs() []netip.AddrPort {
	out := make([]netip.AddrPort, len(t.planes))
	for i, p := range t.planes {
		out[i] = p.port.LocalAddr()
	}
	return out
}

// Planes returns the number of planes.
func (t *Transport) Planes() int { return len(t.planes) }

// entropyPort returns the socket for entropy e of plane p, opening it on
// first use (an ephemeral port on the plane's IP; send-only).
func (t *Transport) entropyPort(p, e int) *ioengine.Port {
	pl := t.planes[p]
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for len(pl.entropy) <= e {
		cfg := t.ioConfig()
		cfg.SocketBuffer = 1 << 20
		port, err := ioengine.Listen(netip.AddrPortFrom(pl.port.LocalAddr().Addr(), 0), cfg)
		if err != nil {
			t.cfg.Logger.Warn("entropy socket failed; using the plane socket", "plane", p, "err", err)
			return pl.port
		}
		pl.entropy = append(pl.entropy, port)
	}
	return pl.entropy[e]
}

func (t *Transport) pollLoop(pl *plane) {
	defer t.wg.Done()
	err := pl.port.Run(t.ctx, func(b *ioengine.Batch) { t.handleBatch(pl, b) })
	if err != nil {
		t.cfg.Logger.Error("poll loop stopped", "plane", pl.idx, "err", err)
	}
}

// busyLoop polls every plane's socket from one spinning goroutine.
func (t *Transport) busyLoop() {
	defer t.wg.Done()
	ports := make([]*ioengine.Port, len(t.planes))
	for i, pl := range t.planes {
		ports[i] = pl.port
	}
	err := ioengine.RunAll(t.ctx, ports, func(i int, b *ioengine.Batch) { t.handleBatch(t.planes[i], b) })
	if err != nil {
		t.cfg.Logger.Error("busy poll loop stopped", "err", err)
	}
}

// handleBatch processes one received batch on plane pl: consecutive
// packets of a connection are handled under one lock, and each touched
// connection sends its ACK once at the end of the batch.
func (t *Transport) handleBatch(pl *plane, b *ioengine.Batch) {
	var cur *Conn
	now := t.cfg.clock.Now()
	wall := time.Now().UnixNano()
	for i := range b.Pkts {
		pk := &b.Pkts[i]
		at := arrival(now, wall, pk.RxTime)
		typ, err := wire.PeekType(pk.Buf)
		if err != nil {
			t.garbage.Add(1)
			continue
		}
		switch typ {
		case wire.TypeData:
			d, err := wire.ParseData(pk.Buf)
			if err != nil {
				t.garbage.Add(1)
				continue
			}
			c := t.lockConn(&cur, d.DstConnID, pl)
			if c == nil {
				continue
			}
			c.onData(now, at, pl.idx, &d, pk.TOS&3 == ioengine.ECNCE)
		case wire.TypeAck:
			// Several ACK packets may share the datagram (wire.AckLength).
			for buf := pk.Buf; len(buf) > 0; {
				n, err := wire.AckLength(buf)
				if err != nil {
					t.garbage.Add(1)
					break
				}
				a, err := wire.ParseAck(buf[:n], pl.ackBlocks[:0])
				if err != nil {
					t.garbage.Add(1)
					break
				}
				buf = buf[n:]
				pl.ackBlocks = a.Blocks[:0]
				if c := t.lockConn(&cur, a.DstConnID, pl); c != nil {
					c.onAck(now, at, pl.idx, &a)
				}
			}
		case wire.TypeInit, wire.TypeInitAck:
			if cur != nil {
				cur.mu.Unlock()
				cur = nil
			}
			h, err := wire.ParseHandshake(pk.Buf)
			if err != nil {
				t.garbage.Add(1)
				continue
			}
			t.onHandshake(now, pl, &h, pk.Addr)
		case wire.TypeClose:
			if cur != nil {
				cur.mu.Unlock()
				cur = nil
			}
			cl, err := wire.ParseClose(pk.Buf)
			if err != nil {
				t.garbage.Add(1)
				continue
			}
			if c := t.conn(cl.DstConnID); c != nil {
				c.onClose(&cl)
			}
		default:
			t.garbage.Add(1)
		}
	}
	if cur != nil {
		cur.mu.Unlock()
	}
	for _, c := range pl.touched {
		c.afterBatch(now, pl)
	}
	clear(pl.touched)
	pl.touched = pl.touched[:0]
	pl.ackTx.flush() // the batch's ACKs: as few send calls as there are ports
}

// recycleSendMsg returns m to the pool once nothing refers to it: it has
// left the connection's queue and map and its sender has its result.
func (t *Transport) recycleSendMsg(m *sendMsg) {
	*m = sendMsg{signal: m.signal}
	t.sendMsgPool.Put(m)
}

// sendOut sends ob's batch (if any) and releases it; a failure other than
// a closed port is logged as msg, with the connection's id when conn is
// not 0 (an id, not variadic arguments: those would cost a heap
// allocation per send).
func (t *Transport) sendOut(ob outBatch, msg string, conn protocol.ConnectionID) {
	if ob.batch == nil {
		return
	}
	if err := ob.port.Send(ob.batch); err != nil && !errors.Is(err, ioengine.ErrClosed) {
		if conn != 0 {
			t.cfg.Logger.Debug(msg, "conn", conn, "err", err)
		} else {
			t.cfg.Logger.Debug(msg, "err", err)
		}
	}
	ob.batch.Release()
}

// arrival returns when a datagram reached this host: now less the time it
// waited in the socket for its poll loop (kernel receive time rxTime, Unix
// ns, against the wall clock at the read), or now when unknown or
// implausible (the wall clock stepped).
func arrival(now time.Time, wall, rxTime int64) time.Time {
	if rxTime == 0 {
		return now
	}
	age := wall - rxTime
	if age <= 0 || age > int64(time.Second) {
		return now
	}
	return now.Add(-time.Duration(age))
}

// lockConn makes *cur the locked connection id (nil if unknown) and records
// it as touched by this batch.
func (t *Transport) lockConn(cur **Conn, id protocol.ConnectionID, pl *plane) *Conn {
	if *cur != nil && (*cur).id == id {
		return *cur
	}
	if *cur != nil {
		(*cur).mu.Unlock()
		*cur = nil
	}
	c := t.conn(id)
	if c == nil {
		t.unknown.Add(1)
		return nil
	}
	c.mu.Lock()
	if c.state == stateDone {
		c.mu.Unlock()
		return nil
	}
	if !c.touched {
		c.touched = true
		pl.touched = append(pl.touched, c)
	}
	*cur = c
	return c
}

func (t *Transport) conn(id protocol.ConnectionID) *Conn {
	t.mu.RLock()
	c := t.conns[id]
	t.mu.RUnlock()
	return c
}

// register adds c under a fresh random id.
func (t *Transport) register(c *Conn) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	for {
		id := t.cfg.connID()
		if id != 0 && t.conns[id] == nil {
			c.id = id
			t.conns[id] = c
			return nil
		}
	}
}

func (t *Transport) unregister(c *Conn) {
	st := c.Stats() // before taking t.mu: Stats takes c.mu
	t.mu.Lock()
	if t.conns[c.id] == c {
		delete(t.conns, c.id)
		for _, p := range st.Planes {
			if p.Plane < len(t.closedRetx) {
				t.closedRetx[p.Plane] += p.Retransmits
			}
		}
	}
	t.leavePeer(c)
	if c.accepted {
		k := peerKey{c.peerInstance, c.peerID}
		if t.byPeer[k] == c {
			delete(t.byPeer, k)
		}
	}
	t.mu.Unlock()
}

func (t *Transport) activeConns() int {
	t.mu.RLock()
	n := len(t.conns)
	t.mu.RUnlock()
	return n
}

const (
	activeWindow  = 100 * time.Millisecond
	activeRecount = 10 * time.Millisecond
)

// activeSenders returns how many peers sent data recently (at least 1),
// recounted at most every activeRecount over the peers (not the
// connections: 4,000 of them were scanned every 10 ms, 5% of an incast
// receiver's CPU).
func (t *Transport) activeSenders(now time.Time) int64 {
	n := now.UnixNano()
	if at := t.sendersAt.Load(); n-at < int64(activeRecount) && t.sendingPeers.Load() > 0 {
		return t.sendingPeers.Load()
	}
	t.recountMu.Lock()
	defer t.recountMu.Unlock()
	if at := t.sendersAt.Load(); n-at < int64(activeRecount) && t.sendingPeers.Load() > 0 {
		return t.sendingPeers.Load()
	}
	var roots []*peer // a peer has an address per plane: count each once
	t.mu.RLock()
	for _, p := range t.peers {
		r := p.root()
		if n-r.lastData.Load() < int64(activeWindow) && !slices.Contains(roots, r) {
			roots = append(roots, r)
		}
	}
	t.mu.RUnlock()
	peers := max(int64(len(roots)), 1)
	t.sendingPeers.Store(peers)
	t.sendersAt.Store(n)
	return peers
}

func (t *Transport) onHandshake(now time.Time, pl *plane, h *wire.Handshake, from netip.AddrPort) {
	if int(h.Planes) != len(t.planes) {
		t.cfg.Logger.Warn("handshake from a peer with a different plane count", "peer", from, "planes", h.Planes, "local", len(t.planes))
	}
	switch h.Type {
	case wire.TypeInitAck:
		if c := t.conn(h.DstConnID); c != nil {
			c.mu.Lock()
			c.onInitAck(now, pl.idx, h)
			c.mu.Unlock()
		}
	case wire.TypeInit:
		k := peerKey{h.Instance, h.SrcConnID}
		t.mu.RLock()
		c := t.byPeer[k]
		closed := t.closed
		t.mu.RUnlock()
		if closed {
			return
		}
		if c == nil {
			var err error
			c, err = t.accept(now, h, k, from)
			if err != nil || c == nil {
				return
			}
		}
		c.mu.Lock()
		if int(h.Plane) < len(c.peerAddrs) && int(h.Plane) == pl.idx {
			if c.peerAddrs[h.Plane] != from || c.peer.Load() == nil {
				t.joinPeer(c, now, peerAddr{plane: pl.idx, addr: from})
				c.bindPaths()
			}
			c.peerAddrs[h.Plane] = from
			c.heard(now, pl.idx)
			c.logEstablished()
		}
		c.sendHandshake(wire.TypeInitAck, pl.idx)
		c.mu.Unlock()
		c.wakeSender()
	}
}

func (t *Transport) accept(now time.Time, h *wire.Handshake, k peerKey, from netip.AddrPort) (*Conn, error) {
	c := newConn(t, h.Mode, true)
	c.peerID = h.SrcConnID
	c.peerInstance = h.Instance
	c.peerIP = from.Addr()
	c.applyPeerParams(h)
	c.state = stateEstablished
	c.lastRecv = now
	if err := t.register(c); err != nil {
		return nil, err
	}
	t.mu.Lock()
	if old := t.byPeer[k]; old != nil { // raced with another plane's INIT
		delete(t.conns, c.id)
		t.mu.Unlock()
		return old, nil
	}
	// Queued for Accept before another plane's INIT can find it: a
	// connection refused after it was published got INIT-ACKs on the other
	// planes, and its peer sent into a connection that no longer existed.
	select {
	case t.acceptQ <- c:
	default:
		delete(t.conns, c.id)
		t.mu.Unlock()
		t.cfg.Logger.Warn("accept backlog full; refusing connection", "peer", from)
		return nil, nil
	}
	t.byPeer[k] = c
	t.mu.Unlock()
	c.start()
	return c, nil
}

// Dial connects to a peer given its address on each plane (same order as
// Config.Local). It returns once the peer answered on at least one plane.
func (t *Transport) Dial(ctx context.Context, peer []netip.AddrPort) (*Conn, error) {
	if len(peer) != len(t.planes) {
		return nil, fmt.Errorf("transport: dial: %d peer addresses for %d planes", len(peer), len(t.planes))
	}
	c := newConn(t, t.cfg.Mode, false)
	copy(c.peerAddrs, peer)
	if err := t.register(c); err != nil {
		return nil, err
	}
	now := t.cfg.clock.Now()
	t.joinPeer(c, now, dialAddrs(peer)...)
	c.mu.Lock()
	c.bindPaths()
	c.lastRecv = now
	c.mu.Unlock()
	c.start()
	ctx, cancel := context.WithTimeout(ctx, t.cfg.HandshakeTimeout)
	defer cancel()
	select {
	case <-c.established:
		return c, nil
	case <-c.doneCh:
		return nil, c.err()
	case <-ctx.Done():
		err := ctx.Err()
		if err == context.DeadlineExceeded {
			err = fmt.Errorf("%w after %v", ErrHandshakeTimeout, t.cfg.HandshakeTimeout)
		}
		c.fail(err)
		return nil, err
	}
}

// Accept returns the next connection a peer dialed.
func (t *Transport) Accept(ctx context.Context) (*Conn, error) {
	select {
	case c := <-t.acceptQ:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.ctx.Done():
		return nil, ErrClosed
	}
}

// SetPathSet replaces the path set of every connection, and of future
// ones, atomically per connection.
func (t *Transport) SetPathSet(ps PathSet) error {
	if err := ps.validate(len(t.planes)); err != nil {
		return err
	}
	t.mu.Lock()
	t.pathSet = clonePathSet(ps)
	conns := make([]*Conn, 0, len(t.conns))
	for _, c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, c := range conns {
		if err := c.SetPathSet(ps); err != nil {
			return err
		}
	}
	return nil
}

func (t *Transport) currentPathSet() PathSet {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return clonePathSet(t.pathSet)
}

// Close aborts every connection (pending operations fail with ErrClosed)
// and closes the sockets.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	conns := make([]*Conn, 0, len(t.conns))
	for _, c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, c := range conns {
		c.abort(ErrClosed, true)
	}
	for _, c := range conns {
		c.wg.Wait()
	}
	t.cancel()
	t.closePorts()
	t.wg.Wait()
	return nil
}

func (t *Transport) closePorts() {
	for _, pl := range t.planes {
		pl.mu.Lock()
		for _, p := range pl.entropy {
			p.Close()
		}
		pl.mu.Unlock()
	}
}

// SetRates changes, at runtime, each connection's egress cap, the ingress
// budget this endpoint grants its senders from, and per-plane send caps
// (indexed by plane, shared by the plane's paths of each connection). Zero
// means unlimited; planeCaps may be shorter than the planes.
func (t *Transport) SetRates(egressCap, ingressBudget Rate, planeCaps []Rate) error {
	if len(planeCaps) > len(t.planes) {
		return fmt.Errorf("transport: %d plane caps for %d planes", len(planeCaps), len(t.planes))
	}
	caps := slices.Clone(planeCaps)
	t.egressCap.Store(uint64(egressCap))
	t.ingressBudget.Store(uint64(ingressBudget))
	t.planeCaps.Store(&caps)
	return nil
}

// planeCap is the send cap of a plane (0: none).
func (t *Transport) planeCap(plane int) Rate {
	caps := t.planeCaps.Load()
	if caps == nil || plane >= len(*caps) {
		return 0
	}
	return (*caps)[plane]
}

// PlaneStats are I/O counters of one local plane.
type PlaneStats struct {
	Plane                         int
	Addr                          netip.AddrPort
	RxPackets, RxBytes, RxBatches uint64
	TxPackets, TxBytes, TxBatches uint64
	TxErrors                      uint64
	// KernelDrops counts datagrams the kernel dropped for lack of socket
	// buffer (SO_RXQ_OVFL).
	KernelDrops uint64
	// Retransmits counts data packets sent again on the plane, over every
	// connection (closed ones included).
	Retransmits uint64
}

// TransportStats are the endpoint's counters.
type TransportStats struct {
	Planes []PlaneStats
	// Garbage counts datagrams that failed to parse (dropped).
	Garbage uint64
	// UnknownConnection counts packets for no known connection.
	UnknownConnection uint64
	Connections       int
}

// Stats returns the endpoint's counters.
func (t *Transport) Stats() TransportStats {
	s := TransportStats{Garbage: t.garbage.Load(), UnknownConnection: t.unknown.Load(), Connections: t.activeConns()}
	for _, pl := range t.planes {
		ps := PlaneStats{Plane: pl.idx, Addr: pl.port.LocalAddr()}
		pl.mu.Lock()
		for _, p := range pl.entropy {
			st := p.Stats()
			ps.RxPackets += st.RxPackets
			ps.RxBytes += st.RxBytes
			ps.RxBatches += st.RxBatches
			ps.TxPackets += st.TxPackets
			ps.TxBytes += st.TxBytes
			ps.TxBatches += st.TxBatches
			ps.TxErrors += st.TxErrors
			ps.KernelDrops += st.KernelDrops
		}
		pl.mu.Unlock()
		s.Planes = append(s.Planes, ps)
	}
	t.mu.RLock()
	conns := make([]*Conn, 0, len(t.conns))
	for _, c := range t.conns {
		conns = append(conns, c)
	}
	for i := range s.Planes {
		s.Planes[i].Retransmits = t.closedRetx[i]
	}
	t.mu.RUnlock()
	for _, c := range conns {
		for _, p := range c.Stats().Planes {
			if p.Plane < len(s.Planes) {
				s.Planes[p.Plane].Retransmits += p.Retransmits
			}
		}
	}
	return s
}

// bufferPool keeps message buffers handed back with Conn.Recycle.
type bufferPool struct {
	mu    sync.Mutex
	free  [][]byte
	bytes int
}

const maxPooledBytes = 64 << 20

func (p *bufferPool) get(n int) []byte {
	p.mu.Lock()
	if k := len(p.free); k > 0 && cap(p.free[k-1]) >= n {
		b := p.free[k-1]
		p.free[k-1] = nil
		p.free = p.free[:k-1]
		p.bytes -= cap(b)
		p.mu.Unlock()
		return b[:n]
	}
	p.mu.Unlock()
	return make([]byte, n)
}

func (p *bufferPool) put(b []byte) {
	if cap(b) == 0 {
		return
	}
	p.mu.Lock()
	if p.bytes+cap(b) <= maxPooledBytes {
		p.free = append(p.free, b[:0])
		p.bytes += cap(b)
	}
	p.mu.Unlock()
}
