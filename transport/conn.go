package transport

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/multiplane/multiplane/transport/internal/ackhandler"
	"github.com/multiplane/multiplane/transport/internal/congestion"
	"github.com/multiplane/multiplane/transport/internal/ioengine"
	"github.com/multiplane/multiplane/transport/internal/pathsel"
	"github.com/multiplane/multiplane/transport/internal/protocol"
	"github.com/multiplane/multiplane/transport/internal/wire"
)

type connState int

const (
	stateHandshake connState = iota
	stateEstablished
	stateClosing // Close called: no new messages
	stateDone
)

// Conn is a connection to a peer. It is safe for concurrent use: many
// goroutines may Send and Recv at once.
type Conn struct {
	t        *Transport
	cfg      *Config
	mode     Mode
	accepted bool
	wg       sync.WaitGroup

	id, peerID   protocol.ConnectionID
	peerInstance uint64 // the dialer's transport instance, on accepted connections
	peerIP       netip.Addr
	weight       atomic.Uint64 // float64 bits of SetWeight's weight; 0 = 1
	established  chan struct{}
	doneCh       chan struct{}

	mu       sync.Mutex
	state    connState
	failErr  error
	touched  bool // in the current poll batch's list (poll goroutine only)
	needWake bool
	// ackOpened: an ACK of the current poll batch acknowledged data; the
	// poll loop sends what the windows allow at the end of the batch
	// (run to completion) instead of waking the sender.
	ackOpened bool
	// sleepUntil is when the sender next runs by itself; the
	// poll loop wakes it sooner only when a deadline moved before it.
	sleepUntil time.Time
	// txMu orders data flushes between the worker (sched.go) and the poll
	// loops: taken while mu is held, so batches leave in the order fill
	// built them (per-path sequence numbers stay in order on the wire).
	txMu sync.Mutex

	peerAddrs  []netip.AddrPort
	initAcked  []bool
	initSent   int
	nextInit   time.Time
	dgram      protocol.ByteCount // largest datagram sent: min of both ends' maximum
	chunk      protocol.ByteCount // payload per data packet
	ackBlocks  int                // path blocks per ACK that fit dgram
	peerDgram  protocol.ByteCount // the peer's maximum, from its handshake
	setupLog   bool               // the established connection was logged
	lastRecv   time.Time
	lastSend   time.Time
	keepPlane  int
	generation uint64

	// send side
	paths       map[protocol.PathID]*path
	active      []*path
	sel         *pathsel.Selector
	sendMsgs    map[uint32]*sendMsg
	sendQ       fifo[*sendMsg]
	nextMsgID   uint32
	sendDone    msgWindow // messages acknowledged whole
	retx        []retxItem
	retxHead    int
	gbnQ        []ackhandler.Ref
	gbnHead     int
	lastRewind  protocol.PacketNumber
	hasRewind   bool
	queued      protocol.ByteCount
	spaceCh     chan struct{}
	sentNew     protocol.ByteCount
	peerMaxData protocol.ByteCount
	grant       protocol.Rate
	resending   bool // fill is placing a retransmission (eligible)
	connPacer   *congestion.Pacer
	curAvoid    int
	stallStreak int // consecutive all-path timeouts treated as a stall
	now         time.Time
	out         []outBatch
	outSpare    []outBatch // an empty array for out when the poll loop takes it

	// receive side
	rpaths     map[protocol.PathID]*rpath
	ackList    []*rpath
	nak        bool
	ackNow     bool      // an ACK is due at the end of the batch
	ackPending bool      // an ACK is deferred until ackDue
	ackDue     time.Time // when a deferred ACK goes out (sender)
	inMsgs     map[uint32]*recvMsg
	recvDone   msgWindow // messages delivered
	ready      [][]byte
	readyHead  int
	recvCh     chan struct{}
	consumed   protocol.ByteCount
	advertised protocol.ByteCount

	sched    schedState           // its place in its worker (sched.go)
	peer     atomic.Pointer[peer] // the remote endpoint, shared by its connections
	stats    connCounters
	protoErr error // a protocol violation by the peer ends the connection
}

type path struct {
	id       protocol.PathID
	plane    int
	entropy  int
	idx      int // index in Conn.active, -1 when not in the path set
	port     *ioengine.Port
	sent     *ackhandler.SentPath
	shared   *sharedPath // rtt, window and pacer, shared with the peer's other connections
	conn     *Conn
	queued   bool   // waiting for a turn in the shared window (guarded by shared.mu)
	queueGen uint32 // its latest entry in the queue (guarded by shared.mu)
	resend   bool   // in shared.resends (guarded by shared.mu)
	rtt      *congestion.RTTStats
	pacer    *congestion.Pacer
	retx     uint64
	lastECN  uint64
	// bytes sent since the last packet that asked for an immediate ACK
	sinceAckNow protocol.ByteCount
}

type rpath struct {
	id       protocol.PathID
	plane    int
	sack     ackhandler.ReceivedPath
	inorder  ackhandler.InOrder
	listed   bool
	rxPkts   uint64
	dupPkts  uint64
	ceMarked uint64
}

type retxItem struct {
	ref   ackhandler.Ref
	avoid int
}

type outBatch struct {
	port  *ioengine.Port
	batch *ioengine.Batch
	// pack, for a batch of ACK packets, is the datagram size up to which a
	// coalescer may pack them with other ACKs to the same address (0:
	// never).
	pack protocol.ByteCount
}

// sendMsg and recvMsg carry the chunk bitmap of a message of up to 64
// chunks inline and are recycled (Transport.sendMsgPool, recvMsgPool):
// a 64-byte round trip allocated 21 objects, and the collections they
// caused set its 99.9th percentile.
type sendMsg struct {
	id     uint32
	data   []byte
	chunks int
	next   int // next chunk to send for the first time
	acked  []uint64
	nAcked int
	// comp is SendAsync's completion. A Send has none: it waits for
	// signal (buffered, kept when the message is recycled) and reads err.
	comp        *Completion
	signal      chan struct{}
	err         error
	ackedInline [1]uint64
}

type recvMsg struct {
	buf        []byte
	total      uint32
	n          int
	got        int
	bits       []uint64
	bitsInline [1]uint64
}

// bitmap returns a zeroed bitmap of n bits, in inline when it fits.
func bitmap(inline []uint64, n int) []uint64 {
	w := (n + 63) / 64
	if w > len(inline) {
		return make([]uint64, w)
	}
	clear(inline)
	return inline[:w]
}

type connCounters struct {
	msgsSent, msgsRecv                      uint64
	bytesAcked, bytesRecv                   uint64
	retransmits, spurious, dupPkts, garbled uint64
	flowBlocked                             uint64
	planeRxBytes, planeRxPkts               []uint64
	// ackSends: poll batches whose ACKs let data out (sent by the poll
	// loop); wakes: times the sender was woken; runs: turns its worker
	// gave it.
	ackSends, wakes, runs uint64
}

// Completion reports the end of an asynchronous send. Its channel is
// made only when Done or Wait find the send still pending: most are
// looked at after the end, and a channel per message was half of what a
// small message cost the collector.
type Completion struct {
	ended atomic.Bool // err is set
	mu    sync.Mutex
	done  chan struct{} // made on demand; closed at the end
	err   error
}

// closedCh is the Done of a completion asked after its end.
var closedCh = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// end records the result and wakes those waiting on Done.
func (c *Completion) end(err error) {
	c.mu.Lock()
	c.err = err
	c.ended.Store(true)
	if c.done != nil {
		close(c.done)
	}
	c.mu.Unlock()
}

// Done is closed when the message was acknowledged in full or failed.
func (c *Completion) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended.Load() {
		return closedCh
	}
	if c.done == nil {
		c.done = make(chan struct{})
	}
	return c.done
}

// Err returns nil if the peer received the whole message, the failure
// otherwise. It is valid after Done is closed.
func (c *Completion) Err() error {
	if c.ended.Load() {
		return c.err
	}
	return nil
}

// Wait blocks until the send completes or ctx ends.
func (c *Completion) Wait(ctx context.Context) error {
	if c.ended.Load() {
		return c.err
	}
	select {
	case <-c.Done():
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func makeRef(msg uint32, chunk int) ackhandler.Ref {
	return ackhandler.Ref(uint64(msg)<<32 | uint64(uint32(chunk)))
}

func splitRef(r ackhandler.Ref) (uint32, int) { return uint32(r >> 32), int(uint32(r)) }

func newConn(t *Transport, mode Mode, accepted bool) *Conn {
	c := &Conn{
		t: t, cfg: &t.cfg, mode: mode, accepted: accepted,
		established: make(chan struct{}),
		doneCh:      make(chan struct{}),
		recvCh:      make(chan struct{}, 1),
		peerAddrs:   make([]netip.AddrPort, len(t.planes)),
		initAcked:   make([]bool, len(t.planes)),
		paths:       map[protocol.PathID]*path{},
		sendMsgs:    map[uint32]*sendMsg{},
		rpaths:      map[protocol.PathID]*rpath{},
		inMsgs:      map[uint32]*recvMsg{},
		sendDone:    newMsgWindow(),
		recvDone:    newMsgWindow(),
		connPacer:   congestion.NewPacer(64 << 10),
		curAvoid:    -1,
		// The handshake is its first send: a zero time here put the
		// keepalive deadline in year 1, and the worker ran a dialing
		// connection without pause until its INIT-ACK came.
		lastSend: t.cfg.clock.Now(),
	}
	c.stats.planeRxBytes = make([]uint64, len(t.planes))
	c.stats.planeRxPkts = make([]uint64, len(t.planes))
	c.setDatagram(t.cfg.MaxDatagramSize)
	c.peerMaxData = t.cfg.ReceiveWindow // until the peer says otherwise
	c.advertised = t.cfg.ReceiveWindow
	c.applyPathSet(t.currentPathSet())
	return c
}

// setDatagram sets the largest datagram the connection sends: every DATA,
// ACK and CLOSE fits it, so the peer, whose receive buffers hold its own
// maximum, accepts them all.
func (c *Conn) setDatagram(d protocol.ByteCount) {
	c.dgram = d
	c.chunk = wire.MaxDataPayload(d)
	c.ackBlocks = min(maxAckBlocks, int(d-wire.AckHeaderSize-wire.CRCSize)/ackBlockSize)
}

// applyPeerParams takes the peer's datagram size and credit from a
// handshake: the connection sends datagrams of at most the smaller of the
// two ends' MaxDatagramSize (both ends then cut messages into the same
// chunks).
func (c *Conn) applyPeerParams(h *wire.Handshake) {
	c.peerDgram = h.MaxDatagramSize
	if d := min(h.MaxDatagramSize, c.cfg.MaxDatagramSize); d != c.dgram && len(c.sendMsgs) == 0 {
		c.setDatagram(d)
		c.resizePaths()
	}
	if h.MaxData > c.peerMaxData || c.state == stateHandshake {
		c.peerMaxData = h.MaxData
	}
}

// resizePaths rebuilds the paths made before the handshake, sized for the
// local maximum datagram, for the agreed one: their congestion window and
// pacer burst count in datagrams. Nothing was sent on them yet.
func (c *Conn) resizePaths() {
	for id, p := range c.paths {
		if p.sent.NextPacketNumber() != 0 {
			continue
		}
		np := c.newPath(id, p.plane, p.entropy)
		p.shared.leave(p, c.cfg.clock.Now())
		np.idx = p.idx
		c.paths[id] = np
		if p.idx >= 0 {
			c.active[p.idx] = np
		}
	}
}

// logEstablished logs the connection's setup with the agreed datagram
// size, and warns, once per peer and pair of sizes, when the two ends'
// maximums differ (a mismatched MTU setting costs throughput silently
// otherwise); c.mu held.
func (c *Conn) logEstablished() {
	if c.setupLog {
		return
	}
	c.setupLog = true
	log := c.t.cfg.Logger
	// Plain integers, so every handler prints them as numbers.
	agreed, local, remote := int64(c.dgram), int64(c.cfg.MaxDatagramSize), int64(c.peerDgram)
	var addr netip.AddrPort
	if i := c.anyPlane(0); i >= 0 {
		addr = c.peerAddrs[i]
	}
	log.Debug("connection established", "conn", c.id, "peer_conn", c.peerID, "peer", addr, "accepted", c.accepted,
		"mode", c.mode.String(), "datagram_size", agreed, "local_max_datagram", local, "peer_max_datagram", remote)
	if remote == local {
		return
	}
	key := local<<32 | remote
	if p := c.peer.Load(); p != nil && p.root().dgramLogged.Swap(key) == key {
		return
	}
	log.Warn("datagram sizes differ between the ends; using the smaller", "peer", addr, "conn", c.id,
		"datagram_size", agreed, "local_max_datagram", local, "peer_max_datagram", remote)
}

func (c *Conn) start() { c.t.schedule(c) }

// ID returns the local connection id.
func (c *Conn) ID() uint32 { return uint32(c.id) }

// Mode returns the connection's reliability scheme.
func (c *Conn) Mode() Mode { return c.mode }

// RemoteAddrs returns the peer's address on each plane (zero if unknown).
func (c *Conn) RemoteAddrs() []netip.AddrPort {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]netip.AddrPort(nil), c.peerAddrs...)
}

// Done is closed when the connection has ended (closed or failed).
func (c *Conn) Done() <-chan struct{} { return c.doneCh }

// Err returns why the connection ended, or nil while it is up.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stateDone {
		return nil
	}
	return c.failErr
}

func (c *Conn) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failErr
}

func (c *Conn) signalRecv() {
	select {
	case c.recvCh <- struct{}{}:
	default:
	}
}

// SetPathSet replaces the connection's path set atomically: the next
// packet uses the new set. Paths that stay keep their state; data in
// flight on removed paths is still acknowledged or, after a timeout,
// resent on the new paths.
func (c *Conn) SetPathSet(ps PathSet) error {
	if err := ps.validate(len(c.t.planes)); err != nil {
		return err
	}
	c.mu.Lock()
	c.applyPathSet(clonePathSet(ps))
	c.mu.Unlock()
	c.wakeSender()
	return nil
}

func pathIDFor(plane, entropy int) protocol.PathID { return protocol.PathID(plane<<8 | entropy) }

// applyPathSet builds the active path list and a new selector; c.mu held
// (or c not yet shared).
func (c *Conn) applyPathSet(ps PathSet) {
	for _, p := range c.active {
		p.idx = -1
	}
	c.active = c.active[:0]
	var specs []pathsel.Path
	for _, pp := range ps.Planes {
		if pp.Weight <= 0 {
			continue
		}
		n := max(pp.Entropy, 1)
		for e := 0; e < n; e++ {
			id := pathIDFor(pp.Plane, e)
			p := c.paths[id]
			if p == nil {
				p = c.newPath(id, pp.Plane, e)
				c.paths[id] = p
			}
			p.idx = len(c.active)
			c.active = append(c.active, p)
			specs = append(specs, pathsel.Path{ID: id, Plane: pp.Plane, Entropy: e, Weight: pp.Weight / float64(n)})
			if c.mode == ModeGBN {
				break
			}
		}
		if c.mode == ModeGBN {
			break
		}
	}
	now := c.cfg.clock.Now()
	for _, p := range c.paths {
		if p.idx < 0 { // dropped from the path set: no turns on it
			p.shared.leave(p, now)
		}
	}
	c.sel = pathsel.New(specs, c.sel)
	c.sel.RetireAfter = c.cfg.RetireAfter
	c.sel.ProbeInterval = c.cfg.ProbeInterval
	c.generation = ps.Generation
}

func (c *Conn) newPath(id protocol.PathID, plane, entropy int) *path {
	sh := c.sharedPath(id)
	sent := ackhandler.NewSentPath(id, sh.rtt, sh.cc)
	sent.Shared = sh.cc
	sent.ReorderThreshold = protocol.PacketNumber(c.cfg.ReorderThreshold)
	return &path{
		id: id, plane: plane, entropy: entropy, idx: -1,
		port:   c.t.entropyPort(plane, entropy),
		sent:   sent,
		shared: sh,
		conn:   c,
		rtt:    sh.rtt,
		pacer:  sh.pacer,
	}
}

// sharedPath returns the congestion state of path id: the peer's, shared
// with its other connections, or the connection's own while it does not
// know its peer.
func (c *Conn) sharedPath(id protocol.PathID) *sharedPath {
	mk := func() *sharedPath {
		rtt := congestion.NewRTTStats()
		rtt.MinRTO = c.cfg.MinRTO
		ccfg := congestion.DefaultDelayAIMDConfig(c.dgram)
		ccfg.TargetQueueDelay = c.cfg.TargetQueueDelay
		return &sharedPath{rtt: rtt, cc: congestion.NewShared(ccfg, rtt), pacer: congestion.NewPacer(16 * c.dgram)}
	}
	if p := c.peer.Load(); p != nil {
		return p.root().sharedPath(sharedKey{id: id, dgram: c.dgram}, mk)
	}
	return mk()
}

// bindPaths moves the paths that sent nothing yet to the peer's shared
// state, once the connection knows its peer; c.mu held (or c not yet
// shared).
func (c *Conn) bindPaths() {
	p := c.peer.Load()
	if p == nil {
		return
	}
	for id, old := range c.paths {
		if old.sent.NextPacketNumber() != 0 {
			continue
		}
		np := c.newPath(id, old.plane, old.entropy)
		if np.shared == old.shared {
			continue
		}
		old.shared.leave(old, c.cfg.clock.Now())
		np.idx = old.idx
		c.paths[id] = np
		if old.idx >= 0 {
			c.active[old.idx] = np
		}
	}
}

// Send sends msg and returns when the peer has received all of it, or
// with the error that made that impossible. Send blocks while the
// connection's send buffer is full. msg must not be modified until Send
// returns; when it returns ctx's error instead, the message stays queued
// and may still be sent, so msg must then stay as it is until the
// connection ends (or Withdraw takes it back).
func (c *Conn) Send(ctx context.Context, msg []byte) error {
	m, _, err := c.queue(ctx, msg, false)
	if err != nil {
		return err
	}
	select {
	case <-m.signal:
		err := m.err
		c.t.recycleSendMsg(m)
		return err
	case <-ctx.Done():
		return ctx.Err() // m is left to the collector: it may still be signalled
	}
}

// SendAsync queues msg and returns a Completion that reports when the peer
// has received all of it. msg is sent in place (zero copy) and must not be
// modified until the completion is done. SendAsync blocks only while the
// send buffer is full (backpressure) or until ctx ends.
func (c *Conn) SendAsync(ctx context.Context, msg []byte) (*Completion, error) {
	_, comp, err := c.queue(ctx, msg, true)
	return comp, err
}

// queue waits for room in the send buffer and queues msg. An async
// message reports through comp, and its m may be recycled at once: only a
// Send (async false) may use m after queue returns.
func (c *Conn) queue(ctx context.Context, msg []byte, async bool) (m *sendMsg, comp *Completion, err error) {
	if protocol.ByteCount(len(msg)) > c.cfg.MaxMessageSize {
		return nil, nil, fmt.Errorf("%w: %d bytes, limit %d", ErrMessageTooLarge, len(msg), c.cfg.MaxMessageSize)
	}
	size := protocol.ByteCount(len(msg))
	for {
		c.mu.Lock()
		switch c.state {
		case stateDone:
			err := c.failErr
			c.mu.Unlock()
			return nil, nil, err
		case stateClosing:
			c.mu.Unlock()
			return nil, nil, ErrClosed
		}
		if c.queued == 0 || c.queued+size <= c.cfg.SendBuffer {
			m := c.enqueue(msg, async)
			comp := m.comp
			c.mu.Unlock()
			c.wakeSender()
			return m, comp, nil
		}
		if c.spaceCh == nil {
			c.spaceCh = make(chan struct{})
		}
		ch := c.spaceCh
		c.mu.Unlock()
		select {
		case <-ch:
		case <-c.doneCh:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

func (c *Conn) enqueue(msg []byte, async bool) *sendMsg {
	chunks := int((protocol.ByteCount(len(msg)) + c.chunk - 1) / c.chunk)
	if chunks == 0 {
		chunks = 1
	}
	m := c.t.sendMsgPool.Get().(*sendMsg)
	m.id, m.data, m.chunks = c.nextMsgID, msg, chunks
	m.acked = bitmap(m.ackedInline[:], chunks)
	if async {
		m.comp = new(Completion)
	} else if m.signal == nil {
		m.signal = make(chan struct{}, 1)
	}
	c.nextMsgID++
	c.sendMsgs[m.id] = m
	c.sendQ.push(m)
	c.queued += protocol.ByteCount(len(msg))
	return m
}

// finish ends m's send with err (nil: delivered); m has left sendMsgs
// and sendQ. c.mu held.
func (c *Conn) finish(m *sendMsg, err error) {
	if m.comp == nil {
		// Never blocks: a message is finished once (it leaves sendMsgs
		// first), and signal holds one.
		m.err = err
		m.signal <- struct{}{} // its Send recycles m
		return
	}
	m.comp.end(err)
	c.t.recycleSendMsg(m)
}

// Withdraw takes back every queued message of which nothing was sent yet,
// as a sender does when its deadline passes: their completions end with
// ErrWithdrawn and the peer never sees them. Messages already on their way
// are not touched. It returns how many messages and bytes it took back.
func (c *Conn) Withdraw() (msgs int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateDone {
		return 0, 0
	}
	k := 0 // sendQ[0] may be part sent
	if c.sendQ.len() > 0 && c.sendQ.front().next > 0 {
		k = 1
	}
	// The unsent messages are the newest: their ids are the last given
	// out, and are given out again.
	for i := k; i < c.sendQ.len(); i++ {
		m := c.sendQ.at(i)
		delete(c.sendMsgs, m.id)
		c.queued -= protocol.ByteCount(len(m.data))
		msgs++
		bytes += int64(len(m.data))
		c.finish(m, ErrWithdrawn)
	}
	c.sendQ.truncate(k)
	c.nextMsgID -= uint32(msgs)
	if msgs > 0 && c.spaceCh != nil {
		close(c.spaceCh)
		c.spaceCh = nil
	}
	return msgs, bytes
}

// Recv returns the next complete message, in completion order (not
// necessarily the order they were sent). After the connection ends it
// still returns the messages that had fully arrived, then the error.
func (c *Conn) Recv(ctx context.Context) ([]byte, error) {
	for {
		c.mu.Lock()
		if c.readyHead < len(c.ready) {
			msg := c.ready[c.readyHead]
			c.ready[c.readyHead] = nil
			c.readyHead++
			if c.readyHead == len(c.ready) {
				c.ready, c.readyHead = c.ready[:0], 0
			}
			c.consumed += protocol.ByteCount(len(msg))
			update := c.state != stateDone && c.consumed+c.cfg.ReceiveWindow-c.advertised >= c.cfg.ReceiveWindow/4
			var ob outBatch
			if update {
				ob = c.buildControlAck()
			}
			c.mu.Unlock()
			c.flushOne(ob)
			return msg, nil
		}
		if c.state == stateDone {
			err := c.failErr
			c.mu.Unlock()
			return nil, err
		}
		c.mu.Unlock()
		select {
		case <-c.recvCh:
		case <-c.doneCh:
			c.mu.Lock()
			empty := c.readyHead >= len(c.ready)
			err := c.failErr
			c.mu.Unlock()
			if empty {
				return nil, err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Recycle hands a message returned by Recv back for reuse by later
// messages of the same Transport (saving an allocation and garbage per
// message). msg must not be used afterwards. Calling it is optional.
func (c *Conn) Recycle(msg []byte) { c.t.bufs.put(msg) }

// Close waits (up to PeerTimeout, or until ctx-less Close's own bound)
// for every queued message to be acknowledged, then tells the peer and
// releases the connection. Messages that could not be delivered are
// reported through their Send/Completion errors.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.state == stateDone {
		c.mu.Unlock()
		return nil
	}
	if c.state == stateEstablished || c.state == stateHandshake {
		c.state = stateClosing
	}
	c.mu.Unlock()
	deadline := time.NewTimer(c.cfg.PeerTimeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		pending := len(c.sendMsgs)
		if c.state == stateDone {
			c.mu.Unlock()
			c.wg.Wait()
			return nil
		}
		if pending == 0 {
			c.mu.Unlock()
			break
		}
		if c.spaceCh == nil {
			c.spaceCh = make(chan struct{})
		}
		ch := c.spaceCh
		c.mu.Unlock()
		select {
		case <-ch:
		case <-c.doneCh:
		case <-deadline.C:
			c.abort(fmt.Errorf("%w: close timed out with messages unacknowledged", ErrPeerUnreachable), true)
			c.wg.Wait()
			return nil
		}
	}
	c.abort(ErrClosed, true)
	c.wg.Wait()
	return nil
}

// abort ends the connection with err, optionally telling the peer.
func (c *Conn) abort(err error, tellPeer bool) {
	if tellPeer {
		c.mu.Lock()
		var obs []outBatch
		if c.state != stateDone && c.peerID != 0 {
			obs = c.buildClose()
		}
		c.mu.Unlock()
		for _, ob := range obs {
			c.flushOne(ob)
		}
	}
	c.fail(err)
}

// fail ends the connection: pending sends complete with err, Recv returns
// what had arrived and then err.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.state == stateDone {
		c.mu.Unlock()
		return
	}
	c.state = stateDone
	c.failErr = err
	now := c.cfg.clock.Now()
	for _, p := range c.paths {
		p.sent.Release() // out of the window it shares
		p.shared.leave(p, now)
	}
	for id, m := range c.sendMsgs {
		c.finish(m, err)
		delete(c.sendMsgs, id)
	}
	c.sendQ.reset()
	if c.spaceCh != nil {
		close(c.spaceCh)
		c.spaceCh = nil
	}
	close(c.doneCh)
	c.mu.Unlock()
	c.t.unregister(c)
	c.wakeSender()
	c.signalRecv()
	if !errors.Is(err, ErrClosed) {
		c.t.cfg.Logger.Info("connection ended", "conn", c.id, "err", err)
	}
}

func (c *Conn) onClose(cl *wire.Close) {
	err := ErrPeerClosed
	if cl.Code != 0 {
		err = fmt.Errorf("%w: code %d: %s", ErrPeerClosed, cl.Code, cl.Reason)
	}
	c.fail(err)
}

func (c *Conn) validPlane(p int) bool { return c.peerAddrs[p].IsValid() }

// anyPlane returns pref if the peer's address there is known, else another.
func (c *Conn) anyPlane(pref int) int {
	if pref >= 0 && pref < len(c.peerAddrs) && c.validPlane(pref) {
		return pref
	}
	for i := range c.peerAddrs {
		if c.validPlane(i) {
			return i
		}
	}
	return -1
}

func (c *Conn) buildClose() []outBatch {
	var obs []outBatch
	cl := wire.Close{DstConnID: c.peerID}
	if c.protoErr != nil {
		cl.Code, cl.Reason = 1, c.protoErr.Error()
		if room := int(c.dgram) - wire.CloseHeaderSize - wire.CRCSize; len(cl.Reason) > room {
			cl.Reason = cl.Reason[:room] // the peer accepts datagrams up to c.dgram
		}
	}
	for i := range c.peerAddrs {
		if !c.validPlane(i) {
			continue
		}
		port := c.t.planes[i].port
		b := port.Pool().Get()
		for k := 0; k < 2; k++ {
			pk := b.Next()
			pk.Buf = cl.Append(pk.Buf)
			pk.Addr = c.peerAddrs[i]
		}
		obs = append(obs, outBatch{port: port, batch: b})
	}
	return obs
}

// flushData sends data batches the poll loop took from c.out (c.mu held,
// released), after any batches taken before them: txMu is taken before mu
// is released. When it is held (batches of c wait in its worker), these
// go back to c.out for the worker to send after them.
func (c *Conn) flushData(out []outBatch) {
	if !c.txMu.TryLock() {
		if len(c.out) == 0 {
			c.out = out
		} else {
			c.out = append(c.out, out...)
		}
		c.mu.Unlock()
		c.wakeSender()
		return
	}
	c.mu.Unlock()
	for _, ob := range out {
		c.flushOne(ob)
	}
	c.txMu.Unlock()
	clear(out)
	c.mu.Lock()
	if c.out == nil {
		c.out = out[:0]
	} else if c.outSpare == nil {
		c.outSpare = out[:0]
	}
	c.mu.Unlock()
}

func (c *Conn) flushOne(ob outBatch) { c.t.sendOut(ob, "send failed", c.id) }

func (c *Conn) sendHandshake(typ wire.Type, plane int) {
	h := wire.Handshake{
		Type: typ, Mode: c.mode, Plane: uint8(plane), Planes: uint8(len(c.t.planes)),
		DstConnID: c.peerID, SrcConnID: c.id, Instance: c.t.instance,
		MaxDatagramSize: c.cfg.MaxDatagramSize, MaxData: c.advertised,
	}
	port := c.t.planes[plane].port
	b := port.Pool().Get()
	pk := b.Next()
	pk.Buf = h.Append(pk.Buf)
	pk.Addr = c.peerAddrs[plane]
	if err := port.Send(b); err != nil && !errors.Is(err, ioengine.ErrClosed) {
		c.t.cfg.Logger.Debug("handshake send failed", "plane", plane, "err", err)
	}
	b.Release()
}

func (c *Conn) onInitAck(now time.Time, plane int, h *wire.Handshake) {
	if c.state == stateDone {
		return
	}
	c.heard(now, plane)
	c.initAcked[plane] = true
	if c.state == stateHandshake {
		c.peerID = h.SrcConnID
		c.applyPeerParams(h)
		c.state = stateEstablished
		c.logEstablished()
		close(c.established)
	}
	c.needWake = true
	c.wakeSender()
}
