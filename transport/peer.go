package transport

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/multiplane/multiplane/transport/internal/congestion"
	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// Liveness is per peer, not per connection: a peer heard on any of its
// connections, on any plane, is alive, and a connection fails with
// ErrPeerUnreachable only when its peer has been silent for PeerTimeout.
// With many connections to one peer a connection can hear nothing for a
// long time while the peer is busy on the others (its packets lost in full
// queues, its ACKs behind everyone else's); that is starvation, which the
// per-path timers handle, not a dead peer.
//
// The wire carries no endpoint identity, so a peer is what this transport
// can tell apart: the set of (plane, address) pairs its connections use to
// reach it. A dialed connection names the peer's address on every plane;
// an accepted one learns the dialer's address on a plane from the INIT
// that crossed it. Connections that share any (plane, address) share the
// peer, and a connection that links two peers merges them.

// peerAddr is one of a peer's addresses: where it is reached on a plane.
type peerAddr struct {
	plane int
	addr  netip.AddrPort
}

// peer is a remote endpoint. heard is read and written without locks by
// the poll loops and the scheduler; the rest is guarded by
// Transport.mu.
type peer struct {
	// heard is when anything last arrived from the peer, on any of its
	// connections: the transport clock's time since Transport.epoch.
	heard atomic.Int64
	// merged is the peer this one was merged into (nil for a root).
	merged atomic.Pointer[peer]
	// dgramLogged is the last pair of datagram maximums (local<<32 | peer)
	// warned about, so a mismatch is reported once per peer, not once per
	// connection.
	dgramLogged atomic.Int64

	refs  int        // connections (Transport.mu)
	addrs []peerAddr // keys of Transport.peers that name it (Transport.mu)

	// grant is the rate the peer last granted this endpoint in an ACK, for
	// all of the connections together (0: none).
	grant atomic.Uint64
	// lastData is when data last arrived from the peer (UnixNano of the
	// transport's clock), for grants (activeSenders).
	lastData atomic.Int64

	// planes holds, per local plane, when the peer was last heard on it,
	// when data sent on it was last acknowledged and since when data sent
	// on it waits for an acknowledgement: the evidence an agent reports
	// (see PeerStats). Fixed at creation.
	planes []peerPlane

	// paths is the congestion state of each path to the peer, shared by
	// its connections (see sharedPath).
	pathsMu sync.Mutex
	paths   map[sharedKey]*sharedPath
}

// sharedPath is one path's congestion state, shared by the connections to
// a peer that use the path: its window over all of their bytes in flight,
// its RTT estimate and its pacer. A connection's paths made before it knew
// its peer have their own until they are bound (Conn.bindPaths). Peers
// merged later keep the state their connections had.
type sharedPath struct {
	rtt   *congestion.RTTStats
	cc    *congestion.Shared
	pacer *congestion.Pacer

	// Turns in the window (turns.go).
	mu      sync.Mutex
	waiting []turnEntry // connections' paths waiting for a turn, head first (some stale)
	live    int         // entries not stale
	turn    protocol.ByteCount
	turnAt  time.Time
	// resends: connections whose retransmission the full window holds
	// back, first come first woken by room, beside the turns' head.
	resends []*path
	full    bool // the window held a connection back since the last offer
}

// peerPlane is a peer's evidence on one plane: times since the epoch, 0
// for never. sent is the last data send on the plane; unacked the first
// since the last acknowledgement (at or before acked: nothing waits);
// spoke the last datagram of any kind sent to the peer on the plane, by
// any connection (keepalives are per peer and plane, not per connection).
type peerPlane struct{ heard, acked, unacked, sent, spoke atomic.Int64 }

// mark stores d in v unless v is less than heardGranularity older.
func mark(v *atomic.Int64, d time.Duration) {
	if int64(d)-v.Load() >= int64(heardGranularity) {
		v.Store(int64(d))
	}
}

// sharedKey names a shared path: the path and the datagram size its window
// counts in.
type sharedKey struct {
	id    protocol.PathID
	dgram protocol.ByteCount
}

// sharedPath returns the peer's state for k, made with mk the first time.
func (p *peer) sharedPath(k sharedKey, mk func() *sharedPath) *sharedPath {
	p.pathsMu.Lock()
	defer p.pathsMu.Unlock()
	sp := p.paths[k]
	if sp == nil {
		if p.paths == nil {
			p.paths = map[sharedKey]*sharedPath{}
		}
		sp = mk()
		p.paths[k] = sp
	}
	return sp
}

// heardGranularity bounds how often the shared time is written: every
// connection of a busy peer hears it constantly, and a time a millisecond
// old changes nothing against a timeout of seconds.
const heardGranularity = time.Millisecond

// root returns the peer p was merged into, or p.
func (p *peer) root() *peer {
	for {
		next := p.merged.Load()
		if next == nil {
			return p
		}
		p = next
	}
}

// markHeard records that the peer was heard at d (time since the epoch)
// on plane (-1: no plane in particular).
func (p *peer) markHeard(d time.Duration, plane int) {
	r := p.root()
	mark(&r.heard, d)
	if plane >= 0 && plane < len(r.planes) {
		mark(&r.planes[plane].heard, d)
	}
}

// markSent records that data left on plane at d: the first send since the
// plane's last acknowledgement starts its wait. Three loads per datagram;
// stores once per millisecond and once per acknowledgement.
func (p *peer) markSent(d time.Duration, plane int) {
	r := p.root()
	if plane < 0 || plane >= len(r.planes) {
		return
	}
	pp := &r.planes[plane]
	mark(&pp.sent, d)
	if u := pp.unacked.Load(); u == 0 || u <= pp.acked.Load() {
		pp.unacked.Store(int64(d))
	}
}

// markSpoke records that a datagram left for the peer on plane at d.
func (p *peer) markSpoke(d time.Duration, plane int) {
	r := p.root()
	if plane >= 0 && plane < len(r.planes) {
		mark(&r.planes[plane].spoke, d)
	}
}

// spokeSince reports whether a datagram left for the peer on plane at or
// after d.
func (p *peer) spokeSince(d time.Duration, plane int) bool {
	r := p.root()
	return plane >= 0 && plane < len(r.planes) && r.planes[plane].spoke.Load() >= int64(d)
}

// markAcked records that data sent on plane was acknowledged at d. An
// acknowledgement that ends a wait is always stored (mark's granularity
// would leave the wait open: the last ACKs of a burst come within a
// millisecond of each other).
func (p *peer) markAcked(d time.Duration, plane int) {
	r := p.root()
	if plane < 0 || plane >= len(r.planes) {
		return
	}
	pp := &r.planes[plane]
	if pp.unacked.Load() > pp.acked.Load() {
		pp.acked.Store(int64(d))
		return
	}
	mark(&pp.acked, d)
}

// lastHeard returns when the peer was last heard (time since the epoch).
func (p *peer) lastHeard() time.Duration { return time.Duration(p.root().heard.Load()) }

// joinPeer makes the peer reached at addrs c's peer, creating it or
// merging the peers those addresses named until now. c.mu may be held.
func (t *Transport) joinPeer(c *Conn, now time.Time, addrs ...peerAddr) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conns[c.id] != c {
		return // ended (unregistered) meanwhile: it must not hold a reference
	}
	var cur *peer
	if p := c.peer.Load(); p != nil {
		cur = p.root()
	}
	for _, a := range addrs {
		if !a.addr.IsValid() {
			continue
		}
		p := t.peers[a]
		if p == nil {
			continue
		}
		p = p.root()
		switch {
		case cur == nil:
			cur = p
		case p != cur:
			t.mergePeer(p, cur)
		}
	}
	if cur == nil {
		cur = &peer{planes: make([]peerPlane, len(t.planes))}
		cur.heard.Store(int64(now.Sub(t.epoch)))
	}
	for _, a := range addrs {
		if a.addr.IsValid() && t.peers[a] == nil {
			t.peers[a] = cur
			cur.addrs = append(cur.addrs, a)
		}
	}
	if c.peer.Load() == nil {
		cur.refs++
		c.peer.Store(cur)
	}
	cur.markHeard(now.Sub(t.epoch), -1)
}

// mergePeer merges p into into; t.mu held.
func (t *Transport) mergePeer(p, into *peer) {
	into.refs += p.refs
	p.refs = 0
	for _, a := range p.addrs {
		t.peers[a] = into
	}
	into.addrs = append(into.addrs, p.addrs...)
	p.addrs = nil
	p.merged.Store(into)
	if h := p.heard.Load(); h > into.heard.Load() {
		into.heard.Store(h)
	}
	for i := range min(len(p.planes), len(into.planes)) {
		a, b := &p.planes[i], &into.planes[i]
		for _, v := range [][2]*atomic.Int64{{&a.heard, &b.heard}, {&a.acked, &b.acked}, {&a.unacked, &b.unacked}, {&a.sent, &b.sent}, {&a.spoke, &b.spoke}} {
			if h := v[0].Load(); h > v[1].Load() {
				v[1].Store(h)
			}
		}
	}
}

// leavePeer drops c from its peer, forgetting the peer with its last
// connection; t.mu held.
func (t *Transport) leavePeer(c *Conn) {
	p := c.peer.Load()
	if p == nil {
		return
	}
	c.peer.Store(nil)
	r := p.root()
	r.refs--
	if r.refs > 0 {
		return
	}
	for _, a := range r.addrs {
		if t.peers[a] == r {
			delete(t.peers, a)
		}
	}
	r.addrs = nil
}

// peerCount returns the number of peers the transport tracks.
func (t *Transport) peerCount() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	seen := map[*peer]bool{}
	for _, p := range t.peers {
		seen[p.root()] = true
	}
	return len(seen)
}

// heard records that c's peer was heard at now, on c and plane; c.mu
// held.
func (c *Conn) heard(now time.Time, plane int) {
	c.lastRecv = now
	if p := c.peer.Load(); p != nil {
		p.markHeard(now.Sub(c.t.epoch), plane)
	}
}

// lastHeard returns when c's peer was last heard on any of its
// connections (c's own last receipt if later); c.mu held.
func (c *Conn) lastHeard() time.Time {
	last := c.lastRecv
	if p := c.peer.Load(); p != nil {
		if at := c.t.epoch.Add(p.lastHeard()); at.After(last) {
			last = at
		}
	}
	return last
}

// dialAddrs returns the peer addresses of a dialed connection.
func dialAddrs(peer []netip.AddrPort) []peerAddr {
	out := make([]peerAddr, 0, len(peer))
	for i, a := range peer {
		out = append(out, peerAddr{plane: i, addr: a})
	}
	return out
}

// markSpoke records that a datagram left for c's peer on plane at now,
// if c heard the peer itself within a third of PeerTimeout: a connection
// whose own datagrams are all lost (starved behind others in full queues)
// must not silence the keepalives of the others for long. Its datagrams
// vouch for at most that third plus a keepalive period after it last
// heard, well under PeerTimeout; c.mu held.
func (c *Conn) markSpoke(now time.Time, plane int) {
	if now.Sub(c.lastRecv) > c.cfg.PeerTimeout/3 {
		return
	}
	if p := c.peer.Load(); p != nil {
		p.markSpoke(now.Sub(c.t.epoch), plane)
	}
}

// spokeSince reports whether any connection sent c's peer a datagram on
// plane at or after t.
func (c *Conn) spokeSince(t time.Time, plane int) bool {
	p := c.peer.Load()
	return p != nil && p.spokeSince(t.Sub(c.t.epoch), plane)
}
