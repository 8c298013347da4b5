package transport

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/multiplane/multiplane/transport/internal/ackhandler"
	"github.com/multiplane/multiplane/transport/internal/ioengine"
	"github.com/multiplane/multiplane/transport/internal/protocol"
	"github.com/multiplane/multiplane/transport/internal/wire"
)

const (
	initInterval    = 100 * time.Millisecond // first INIT retransmission
	maxInitInterval = time.Second
	initRetries     = 200 // per plane without an INIT_ACK, after establishment
	maxPerRound     = 256
	spinThreshold   = 200 * time.Microsecond
	grantBurst      = 4 * time.Millisecond
)

// sendWork is one turn of the connection's sender, run by its worker
// (sched.go): it handles the timers that are due and builds packets under
// the lock. It appends the batches it built to stage and returns them with
// c.txMu held (when there are any): the worker sends them coalesced with
// other connections' and then unlocks txMu, so they leave before any the
// connection builds later. It reports whether it filled a round (more may
// go at once), when it is next due (zero: only when woken) and whether the
// connection ended.
func (c *Conn) sendWork(woken bool, stage []outBatch) (more bool, next time.Time, done bool, staged []outBatch) {
	c.mu.Lock()
	c.stats.runs++
	if woken {
		c.stats.wakes++
	}
	if c.state == stateDone {
		c.mu.Unlock()
		return false, time.Time{}, true, stage
	}
	now := c.cfg.clock.Now()
	c.onTimers(now)
	if c.state == stateDone {
		c.mu.Unlock()
		return false, time.Time{}, true, stage
	}
	n := 0
	if c.state != stateHandshake {
		n = c.fill(now)
	}
	next = c.nextDeadline(now)
	c.sleepUntil = next
	if n > 0 {
		c.lastSend = now
	}
	staged = append(stage, c.out...)
	clear(c.out)
	c.out = c.out[:0]
	if len(staged) > len(stage) {
		c.txMu.Lock()
	}
	c.mu.Unlock()
	return n > 0, next, false, staged
}

// hooks adapts a Conn to the interfaces of its internal packages
// (pathsel.Eligible, ackhandler.Handler) without exporting those methods.
type hooks Conn

// Eligible implements pathsel.Eligible: path i has window and pacing room.
func (h *hooks) Eligible(i int) bool { return (*Conn)(h).eligible(i) }

// OnAcked implements ackhandler.Handler.
func (h *hooks) OnAcked(ref ackhandler.Ref, n protocol.ByteCount, wasLost bool) {
	(*Conn)(h).onAcked(ref, n, wasLost)
}

// OnLost implements ackhandler.Handler.
func (h *hooks) OnLost(ref ackhandler.Ref, n protocol.ByteCount) { (*Conn)(h).onLost(ref, n) }

func (c *Conn) hooks() *hooks { return (*hooks)(c) }

func (c *Conn) eligible(i int) bool {
	p := c.active[i]
	if !c.validPlane(p.plane) {
		return false
	}
	rate, burst, granted := c.pathRate(p)
	p.pacer.SetBurst(max(4*c.dgram, rate.BytesIn(burst)))
	paced := p.pacer.Budget(c.now, rate) >= c.dgram || (!granted && p.shared.cc.InFlight() == 0)
	if c.resending {
		// A retransmission does not wait for a turn: its message cannot
		// complete without it, and a turn of one datagram among 4,000
		// connections waited a whole round (seconds) for it.
		if !p.sent.CanSend() {
			p.shared.waitToResend(p)
			return false
		}
		return paced
	}
	return p.shared.admit(p, p.sent.CanSend(), paced, c.now)
}

// pathRate is the pacing rate of path p and its burst: congestion
// control's, under the plane's cap and the receiver's grant. The grant is
// the peer's share of the receiver's line, which the paths' pacers, shared
// by the connections to the peer, divide; granted reports that it set the
// rate, which an empty window then does not lift. A sender that lost
// pacing time to a scheduling stall may catch up by as much as the fabric
// buffers (grantBurst), or the share goes unused.
func (c *Conn) pathRate(p *path) (rate protocol.Rate, burst time.Duration, granted bool) {
	rate, burst = p.sent.CC.PacingRate(), PacingBurst
	if cap := c.t.planeCap(p.plane); cap > 0 {
		n := 0
		for _, q := range c.active {
			if q.plane == p.plane {
				n++
			}
		}
		if share := cap / protocol.Rate(max(n, 1)); rate == 0 || share < rate {
			rate = share
		}
	}
	if g := c.peerGrant(); g > 0 {
		if share := g / protocol.Rate(max(1, len(c.active))); rate == 0 || share < rate {
			rate, burst, granted = share, grantBurst, true
		}
	}
	return rate, burst, granted
}

// sendRate is the connection's own rate limit, the egress cap (0: none).
func (c *Conn) sendRate() protocol.Rate {
	return protocol.Rate(c.t.egressCap.Load())
}

// peerGrant is the rate the peer's receiver granted this endpoint, for all
// of its connections to the peer together (0: none).
func (c *Conn) peerGrant() protocol.Rate {
	if p := c.peer.Load(); p != nil {
		return protocol.Rate(p.root().grant.Load())
	}
	return c.grant
}

func (c *Conn) batchFor(port *ioengine.Port) *ioengine.Batch {
	for i := range c.out {
		if c.out[i].port == port {
			return c.out[i].batch
		}
	}
	b := port.Pool().Get()
	c.out = append(c.out, outBatch{port: port, batch: b})
	return b
}

// fill builds up to one round of data packets; c.mu held.
func (c *Conn) fill(now time.Time) int {
	c.now = now
	rate := c.sendRate()
	if rate > 0 {
		c.connPacer.SetBurst(max(8*c.dgram, rate.BytesIn(PacingBurst)))
	}
	n := 0
	for n < maxPerRound {
		var ref ackhandler.Ref
		avoid := -1
		src := 0 // 1 gbn queue, 2 retransmission, 3 new data
		switch {
		case c.mode == ModeGBN && c.gbnHead < len(c.gbnQ):
			ref, src = c.gbnQ[c.gbnHead], 1
			if !c.needsResend(ref) {
				c.gbnHead++
				if c.gbnHead == len(c.gbnQ) {
					c.gbnQ, c.gbnHead = c.gbnQ[:0], 0
				}
				continue
			}
		case c.retxHead < len(c.retx):
			it := c.retx[c.retxHead]
			if !c.needsResend(it.ref) {
				c.popRetx()
				continue
			}
			ref, avoid, src = it.ref, it.avoid, 2
		case c.sendQ.len() > 0:
			m := c.sendQ.front()
			if c.sentNew+c.chunkLen(m, m.next) > c.peerMaxData || m.id-c.sendDone.below >= wire.MaxMessagesInFlight {
				c.stats.flowBlocked++
				c.passTurns(now)
				return n
			}
			ref, src = makeRef(m.id, m.next), 3
		default:
			c.leaveTurns(now)
			return n
		}
		if rate > 0 && c.connPacer.Budget(now, rate) < c.dgram {
			c.passTurns(now)
			return n
		}
		c.resending = src == 2
		i := c.sel.Pick(now, c.hooks(), avoid)
		c.resending = false
		if i < 0 {
			return n
		}
		p := c.active[i]
		b := c.batchFor(p.port)
		if b.Full() {
			return n
		}
		msgID, chunk := splitRef(ref)
		m := c.sendMsgs[msgID]
		switch src {
		case 1:
			c.gbnHead++
			if c.gbnHead == len(c.gbnQ) {
				c.gbnQ, c.gbnHead = c.gbnQ[:0], 0
			}
		case 2:
			c.popRetx()
		case 3:
			m.next++
			c.sentNew += c.chunkLen(m, chunk)
			if m.next == m.chunks {
				c.sendQ.pop()
			}
		}
		if m == nil { // completed meanwhile (gbn queue)
			continue
		}
		size := c.buildData(now, p, b, m, chunk, src != 3)
		if c.t.cfg.OnEgress != nil {
			c.t.cfg.OnEgress(now, int(size))
		}
		if c.mode == ModeMultipath && c.sel.Retired(i) {
			// A probe: its data may be lost with the path, so it is also
			// queued for another path at once (the receiver drops the copy).
			c.retx = append(c.retx, retxItem{ref: ref, avoid: i})
		}
		if rate > 0 {
			c.connPacer.OnSent(size) // what went out, as the path pacers count
		}
		n++
	}
	return n
}

// passTurns gives up the connection's turns in the shared windows: it has
// nothing it may send now (no data, flow control, its own rate); c.mu held.
func (c *Conn) passTurns(now time.Time) {
	for _, p := range c.active {
		p.shared.pass(p, now)
	}
}

// leaveTurns takes the connection out of the turns of the shared windows:
// it has nothing left to send, so no queue keeps a place (and a head's
// time) for it; c.mu held.
func (c *Conn) leaveTurns(now time.Time) {
	for _, p := range c.active {
		p.shared.leave(p, now)
	}
}

func (c *Conn) chunkLen(m *sendMsg, chunk int) protocol.ByteCount {
	off := protocol.ByteCount(chunk) * c.chunk
	return min(c.chunk, protocol.ByteCount(len(m.data))-off)
}

func (c *Conn) needsResend(ref ackhandler.Ref) bool {
	id, chunk := splitRef(ref)
	m := c.sendMsgs[id]
	return m != nil && m.acked[chunk/64]&(1<<(chunk%64)) == 0
}

func (c *Conn) popRetx() {
	c.retxHead++
	if c.retxHead == len(c.retx) {
		c.retx, c.retxHead = c.retx[:0], 0
	} else if c.retxHead > 1024 && c.retxHead > len(c.retx)/2 {
		k := copy(c.retx, c.retx[c.retxHead:])
		c.retx, c.retxHead = c.retx[:k], 0
	}
}

// buildData appends a data packet to b and returns its size.
func (c *Conn) buildData(now time.Time, p *path, b *ioengine.Batch, m *sendMsg, chunk int, resend bool) protocol.ByteCount {
	off := protocol.ByteCount(chunk) * c.chunk
	end := off + c.chunkLen(m, chunk)
	size := wire.DataOverhead + end - off
	seq := p.sent.OnSent(now, makeRef(m.id, chunk), size)
	p.sent.ArmLossTimer(now, p.shared.used(p, size, c.dgram, now))
	d := wire.Data{
		Entropy: uint8(p.entropy), DstConnID: c.peerID, Seq: seq,
		MessageID: m.id, Chunk: uint32(chunk), TotalLength: uint32(len(m.data)),
	}
	if resend {
		d.Flags = wire.FlagRetransmit
		p.retx++
		c.stats.retransmits++
	}
	// Ask for an immediate ACK about four times per window, and when this
	// packet is the last of the data queued (so the tail is not delayed).
	p.sinceAckNow += size
	cw := p.sent.CC.CongestionWindow()
	if p.sinceAckNow >= cw/4 || (c.sendQ.len() == 0 && c.retxHead >= len(c.retx)) {
		d.Flags |= wire.FlagAckNow
		p.sinceAckNow = 0
	}
	pk := b.Next()
	pk.Buf = d.AppendHeader(pk.Buf)
	pk.Buf = append(pk.Buf, m.data[off:end]...)
	pk.Buf = wire.FinishData(pk.Buf, 0)
	pk.Addr = c.peerAddrs[p.plane]
	p.pacer.OnSent(size)
	if pr := c.peer.Load(); pr != nil {
		pr.markSent(now.Sub(c.t.epoch), p.plane)
	}
	c.markSpoke(now, p.plane)
	return protocol.ByteCount(len(pk.Buf))
}

// onAcked records an acknowledged packet's data.
func (c *Conn) onAcked(ref ackhandler.Ref, _ protocol.ByteCount, wasLost bool) {
	if wasLost {
		c.stats.spurious++
	}
	id, chunk := splitRef(ref)
	m := c.sendMsgs[id]
	if m == nil {
		return
	}
	w, bit := chunk/64, uint64(1)<<(chunk%64)
	if m.acked[w]&bit != 0 {
		return
	}
	m.acked[w] |= bit
	m.nAcked++
	c.stats.bytesAcked += uint64(c.chunkLen(m, chunk))
	if m.nAcked == m.chunks {
		delete(c.sendMsgs, id)
		c.sendDone.finish(id)
		c.queued -= protocol.ByteCount(len(m.data))
		c.stats.msgsSent++
		c.finish(m, nil)
		if c.spaceCh != nil {
			close(c.spaceCh)
			c.spaceCh = nil
		}
	}
}

// onLost queues the data of a lost packet for a resend, avoiding the
// path it was lost on.
func (c *Conn) onLost(ref ackhandler.Ref, _ protocol.ByteCount) {
	if c.mode == ModeGBN {
		return // go-back-N resends through Rewind
	}
	if c.needsResend(ref) {
		c.retx = append(c.retx, retxItem{ref: ref, avoid: c.curAvoid})
	}
}

// onAck processes an ACK that reached the host at at on plane; c.mu held.
func (c *Conn) onAck(now, at time.Time, plane int, a *wire.Ack) {
	waited := now.Sub(at)
	c.heard(now, plane)
	pr := c.peer.Load()
	if a.MaxData > c.peerMaxData {
		c.peerMaxData = a.MaxData
	}
	c.grant = a.RateGrant
	if p := c.peer.Load(); p != nil {
		p.root().grant.Store(uint64(a.RateGrant))
	}
	c.ackOpened = true
	for i := range a.Blocks {
		blk := &a.Blocks[i]
		p := c.paths[blk.PathID]
		if p == nil {
			continue
		}
		if c.mode == ModeGBN {
			acked := p.sent.OnCumulativeAck(now, blk.Cumulative, waited+blk.AckDelay, c.hooks())
			if acked > 0 && pr != nil {
				pr.markAcked(now.Sub(c.t.epoch), p.plane)
			}
			if acked > 0 && p.idx >= 0 {
				c.sel.OnAck(p.idx)
			}
			if a.Flags&wire.FlagNAK != 0 && (!c.hasRewind || c.lastRewind != blk.Cumulative) {
				c.rewind(now, p)
			}
			continue
		}
		c.curAvoid = p.idx
		acked, lost := p.sent.OnAck(now, blk, waited+blk.AckDelay, c.hooks())
		c.curAvoid = -1
		if acked > 0 {
			p.shared.offer() // room in the window: the next in turn
			c.stallStreak = 0
			if pr != nil {
				pr.markAcked(now.Sub(c.t.epoch), p.plane)
			}
		}
		if p.idx < 0 {
			continue
		}
		if acked > 0 {
			c.sel.OnAck(p.idx)
		}
		ecn := p.sent.ECNMarks()
		switch {
		case ecn != p.lastECN || lost > 1:
			p.lastECN = ecn
			c.sel.OnCongestion(p.idx, now, p.rtt.Smoothed())
		case lost == 1:
			c.sel.OnLoss(p.idx, now, p.rtt.Smoothed())
		}
	}
}

// rewind implements go-back-N: resend everything from the first
// unacknowledged packet, with the same packet numbers.
func (c *Conn) rewind(now time.Time, p *path) {
	refs := p.sent.Rewind(now, nil)
	c.lastRewind, c.hasRewind = p.sent.NextPacketNumber(), true
	// Rewound packets go first, in order, before anything not yet resent.
	rest := append([]ackhandler.Ref(nil), c.gbnQ[c.gbnHead:]...)
	c.gbnQ = append(refs[:len(refs):len(refs)], filterRefs(rest, refs)...)
	c.gbnHead = 0
}

func filterRefs(rest, skip []ackhandler.Ref) []ackhandler.Ref {
	if len(skip) == 0 {
		return rest
	}
	in := make(map[ackhandler.Ref]bool, len(skip))
	for _, r := range skip {
		in[r] = true
	}
	out := rest[:0]
	for _, r := range rest {
		if !in[r] {
			out = append(out, r)
		}
	}
	return out
}

// onTimers handles handshake retries, retransmission timeouts, keepalives
// and peer failure; c.mu held.
func (c *Conn) onTimers(now time.Time) {
	// Liveness is the peer's, heard on any of its connections (peer.go):
	// a connection starved by its siblings is not failed for it.
	if now.Sub(c.lastHeard()) > c.cfg.PeerTimeout {
		c.mu.Unlock()
		c.fail(fmt.Errorf("%w: nothing heard from the peer for %v", ErrPeerUnreachable, c.cfg.PeerTimeout))
		c.mu.Lock()
		return
	}
	if !c.accepted && !now.Before(c.nextInit) {
		missing := false
		for i, ok := range c.initAcked {
			if !ok && c.validPlane(i) && (c.state == stateHandshake || c.initSent < initRetries) {
				c.sendHandshake(wire.TypeInit, i)
				missing = true
			}
		}
		if missing {
			c.initSent++
			c.nextInit = now.Add(initBackoff(c.initSent, c.state != stateHandshake))
		} else {
			c.nextInit = now.Add(time.Hour)
		}
	}
	if c.state == stateHandshake {
		return
	}
	if c.ackPending && !now.Before(c.ackDue) {
		c.ackPending = false
		for k := 0; len(c.ackList) > 0 && k < 4 && c.peerID != 0; k++ {
			ob := c.buildAck(now, c.ackList[len(c.ackList)-1].plane)
			if ob.batch == nil {
				break
			}
			c.out = append(c.out, ob)
			c.lastSend = now
		}
	}
	// A stall of this process or of the peer makes every path with data in
	// flight time out at once, with nothing heard from the peer meanwhile;
	// a failed path times out while the peer is heard on others. In the
	// first case the timers only back off (twice at most): resending and
	// retiring would punish healthy paths for a scheduling stall, and a
	// peer that is really gone is caught by PeerTimeout. The peer counts
	// as heard on any of its connections: one with a packet or two in
	// flight per path, all lost, hears nothing on its own.
	stall := false
	if c.mode == ModeMultipath && c.stallStreak < 2 {
		due, healthy := 0, 0
		quiet := true
		heard := c.lastHeard()
		for _, p := range c.paths {
			if p.sent.BytesInFlight() == 0 {
				continue
			}
			d := p.sent.RTODeadline()
			if now.Before(d) {
				healthy++
				continue
			}
			due++
			// Heard from the peer within this path's timeout: not a stall.
			if now.Sub(heard) < p.rtt.RTO() {
				quiet = false
			}
		}
		stall = due > 1 && healthy == 0 && quiet
	}
	if stall {
		c.stallStreak++
	}
	for _, p := range c.paths {
		if p.sent.BytesInFlight() == 0 {
			continue
		}
		if stall {
			p.sent.BackOff(now)
			continue
		}
		if c.mode == ModeGBN {
			if p.sent.GBNTimedOut(now) {
				c.rewind(now, p)
			}
			continue
		}
		c.curAvoid = p.idx
		if p.sent.OnLossTimer(now, c.hooks()) > 0 && p.idx >= 0 {
			c.sel.OnLoss(p.idx, now, p.rtt.Smoothed())
		}
		if p.sent.OnTimeout(now, c.hooks()) > 0 {
			c.stallStreak = 0
			if p.idx >= 0 {
				c.sel.OnTimeout(p.idx, now)
			}
		}
		c.curAvoid = -1
	}
	if quiet := c.cfg.PeerTimeout / 4; now.Sub(c.lastSend) > quiet {
		// On every plane: a keepalive must get through while planes are
		// down, and each plane's path to the peer stays known to be alive.
		// Liveness is per peer, so a plane on which another connection
		// spoke to the peer lately needs none: a receiver of 4,000
		// connections sent more keepalives than ACKs.
		for i := range c.peerAddrs {
			if c.spokeSince(now.Add(-quiet), i) {
				continue
			}
			if ob := c.buildKeepalive(now, i); ob.batch != nil {
				c.out = append(c.out, ob)
			}
		}
		c.lastSend = now
	}
}

// initBackoff is the wait after the n-th round of INITs: initInterval (4
// times that once established, for the planes not answered yet) doubling
// per round up to maxInitInterval, less or more by a quarter at random.
// Every plane carries the first INIT and the first answer establishes, so a
// retry is for a loss on all planes or a server that is behind. At a fixed
// 25 ms, 8 hosts dialing 32 connections each at once sent 41,000 INITs a
// second into a server that was already behind: 500 dials took 8 s per
// host, 1.9 s now.
func initBackoff(n int, established bool) time.Duration {
	d := initInterval
	if established {
		d *= 4
	}
	d = min(d<<min(max(n-1, 0), 8), maxInitInterval)
	return d*3/4 + rand.N(d/2)
}

func (c *Conn) hasDataToSend() bool {
	if (c.mode == ModeGBN && c.gbnHead < len(c.gbnQ)) || c.retxHead < len(c.retx) {
		return true
	}
	if c.sendQ.len() == 0 {
		return false
	}
	m := c.sendQ.front()
	return c.sentNew+c.chunkLen(m, m.next) <= c.peerMaxData
}

// nextDeadline returns when the sender must wake up without a signal.
func (c *Conn) nextDeadline(now time.Time) time.Time {
	next := c.lastHeard().Add(c.cfg.PeerTimeout)
	upd := func(t time.Time) {
		if !t.IsZero() && t.Before(next) {
			next = t
		}
	}
	upd(c.lastSend.Add(c.cfg.PeerTimeout / 4))
	if c.ackPending {
		upd(c.ackDue)
	}
	if !c.accepted {
		upd(c.nextInit)
	}
	for _, p := range c.paths {
		upd(p.sent.RTODeadline())
		if c.mode == ModeMultipath {
			upd(p.sent.LossTime())
		}
	}
	if c.state != stateHandshake && c.hasDataToSend() {
		// Pacing and probe times only count when they lie ahead: a
		// sender blocked for another reason waits for an ACK or a timer.
		future := func(t time.Time) {
			if t.After(now) {
				upd(t)
			}
		}
		future(c.sel.NextProbe())
		c.now = now
		for _, p := range c.active {
			// A connection queued for its turn is woken for it: were it
			// to wake for the pacer too, every connection to the peer
			// would, whenever the pacer lets out a datagram (I1-500: 500
			// connections per sender, paced at their grant).
			if c.validPlane(p.plane) && p.sent.CanSend() && !p.shared.waitsTurn(p, now) {
				rate, _, _ := c.pathRate(p)
				future(now.Add(p.pacer.TimeUntil(now, rate, c.dgram)))
			}
		}
		if r := c.sendRate(); r > 0 {
			future(now.Add(c.connPacer.TimeUntil(now, r, c.dgram)))
		}
	}
	return next
}
