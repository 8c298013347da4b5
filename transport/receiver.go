package transport

import (
	"fmt"
	"time"

	"github.com/multiplane/multiplane/transport/internal/protocol"
	"github.com/multiplane/multiplane/transport/internal/wire"
)

// ACK pacing: the receiver acknowledges at the end of a receive batch when
// a path has ackEvery packets unacknowledged, a packet asked for it
// (FlagAckNow), or a go-back-N NAK is due; otherwise the ACK waits up to
// maxAckDelay (sent by the connection's sender). UET's default
// is one ACK per 16 KiB; ackEvery = 8 is 11.5 KB at 1472-byte datagrams.
const (
	ackEvery    = 8
	maxAckDelay = 500 * time.Microsecond
)

// maxAckBlocks bounds the path blocks of one ACK so it fits a 1472-byte
// datagram: 24 + 27×52 + 4 = 1432; a connection whose agreed datagram is
// smaller sends fewer (Conn.ackBlocks), each at most ackBlockSize bytes.
const (
	maxAckBlocks = 27
	ackBlockSize = wire.AckBlockHeaderSize + wire.SackBits/8
)

// onData processes a DATA packet that arrived on plane; c.mu held.
// at is when the datagram reached the host (see arrival).
func (c *Conn) onData(now, at time.Time, plane int, d *wire.Data, ce bool) {
	c.heard(now, plane)
	if c.state == stateHandshake {
		// The acceptor's data overtook its INIT_ACK: the chunk size is not
		// agreed yet. Not acknowledged, so it is resent.
		return
	}
	if p := c.peer.Load(); p != nil {
		p.root().lastData.Store(now.UnixNano())
	}
	id := pathIDFor(plane, int(d.Entropy))
	rp := c.rpaths[id]
	if rp == nil {
		rp = &rpath{id: id}
		c.rpaths[id] = rp
	}
	rp.plane = plane
	rp.rxPkts++
	c.stats.planeRxPkts[plane]++
	c.stats.planeRxBytes[plane] += uint64(len(d.Payload))
	if ce {
		rp.ceMarked++
	}
	if !rp.listed {
		rp.listed = true
		c.ackList = append(c.ackList, rp)
	}
	if d.Flags&wire.FlagAckNow != 0 {
		c.ackNow = true
	}
	if c.mode == ModeGBN {
		c.ackNow = true // go-back-N acknowledges every batch, like RoCE
		accept, nak := rp.inorder.OnPacket(expandSeq(d.Seq, rp.inorder.Expected), at)
		if nak {
			c.nak = true
		}
		if !accept {
			return
		}
	} else {
		fresh := rp.sack.OnPacket(expandSeq(d.Seq, rp.sack.Next()), ce, at)
		if rp.sack.Unacked >= ackEvery || ce {
			c.ackNow = true
		}
		if !fresh {
			rp.dupPkts++
			c.stats.dupPkts++
			c.ackNow = true
			return
		}
	}
	c.place(d)
}

func expandSeq(low, next protocol.PacketNumber) protocol.PacketNumber {
	return protocol.PacketNumber(wire.Expand24(uint32(low), uint32(next)))
}

// place copies a packet's payload to its chunk in its message and
// delivers the message when it is complete.
func (c *Conn) place(d *wire.Data) {
	id := wire.Expand24(d.MessageID, c.recvDone.below)
	if c.recvDone.done(id) {
		c.stats.dupPkts++
		return
	}
	m := c.inMsgs[id]
	if m == nil {
		if protocol.ByteCount(d.TotalLength) > c.cfg.MaxMessageSize {
			c.violation(fmt.Errorf("message %d of %d bytes exceeds MaxMessageSize %d", id, d.TotalLength, c.cfg.MaxMessageSize))
			return
		}
		n := int((protocol.ByteCount(d.TotalLength) + c.chunk - 1) / c.chunk)
		if n == 0 {
			n = 1
		}
		m = c.t.recvMsgPool.Get().(*recvMsg)
		*m = recvMsg{buf: c.t.bufs.get(int(d.TotalLength)), total: d.TotalLength, n: n}
		m.bits = bitmap(m.bitsInline[:], n)
		c.inMsgs[id] = m
	}
	ci := int(d.Chunk)
	if d.TotalLength != m.total || ci >= m.n {
		c.violation(fmt.Errorf("message %d: length %d/%d or chunk %d of %d inconsistent", id, d.TotalLength, m.total, ci, m.n))
		return
	}
	off := protocol.ByteCount(ci) * c.chunk
	if want := min(c.chunk, protocol.ByteCount(m.total)-off); protocol.ByteCount(len(d.Payload)) != want && m.total != 0 {
		c.violation(fmt.Errorf("message %d: %d payload bytes at offset %d, want %d", id, len(d.Payload), off, want))
		return
	}
	w, bit := ci/64, uint64(1)<<(ci%64)
	if m.bits[w]&bit != 0 {
		c.stats.dupPkts++
		return
	}
	m.bits[w] |= bit
	copy(m.buf[off:], d.Payload)
	m.got++
	if m.got == m.n {
		delete(c.inMsgs, id)
		c.recvDone.finish(id)
		c.ready = append(c.ready, m.buf)
		c.stats.msgsRecv++
		c.stats.bytesRecv += uint64(m.total)
		c.signalRecv()
		*m = recvMsg{}
		c.t.recvMsgPool.Put(m)
	}
}

// violation records a protocol violation by the peer (data the receiver
// cannot place although the packet was well formed). The packet was
// already acknowledged at the path level, so the connection must fail
// loudly rather than lose the data silently; afterBatch ends it. c.mu held.
func (c *Conn) violation(err error) {
	c.stats.garbled++
	if c.protoErr == nil {
		c.protoErr = fmt.Errorf("%w: %v", ErrProtocol, err)
	}
}

func (c *Conn) maxData() protocol.ByteCount {
	md := c.consumed + c.cfg.ReceiveWindow
	c.advertised = md
	return md
}

// rateGrant is the share of the ingress budget of this connection's
// sender endpoint, for all of its connections together: an equal share for
// each peer that sent data recently. So a host with 500 connections gets
// no more than one with a single connection; the sender's shared path
// pacers divide the share among its connections, which their turns in the
// shared windows keep fair. A connection whose peer is not known yet
// counts as one more peer.
func (c *Conn) rateGrant() protocol.Rate {
	b := protocol.Rate(c.t.ingressBudget.Load())
	if b == 0 {
		return 0
	}
	peers := c.t.activeSenders(c.cfg.clock.Now())
	if c.peer.Load() == nil {
		peers++
	}
	return b / protocol.Rate(peers)
}

// afterBatch sends the connection's ACK for what arrived in the batch and,
// when ACKs opened windows, the data they let out; it wakes the sender
// goroutine only when more is due sooner than it would wake by itself.
func (c *Conn) afterBatch(now time.Time, pl *plane) {
	c.mu.Lock()
	c.touched = false
	wake := c.needWake
	c.needWake = false
	var data []outBatch
	if c.ackOpened {
		c.ackOpened = false
		if c.state != stateHandshake && c.state != stateDone {
			now := c.cfg.clock.Now() // the batch's time is as old as its processing
			if n := c.fill(now); n > 0 {
				c.stats.ackSends++
				c.lastSend = now
				wake = wake || n >= maxPerRound
			}
			wake = wake || c.nextDeadline(now).Before(c.sleepUntil)
			if len(c.out) > 0 {
				data = c.out
				c.out, c.outSpare = c.outSpare, nil
			}
		}
	}
	var obs [2]outBatch
	nob := 0
	if c.ackNow || c.nak {
		c.ackNow = false
		c.ackPending = false
		for len(c.ackList) > 0 && nob < len(obs) && c.state != stateDone && c.peerID != 0 {
			ob := c.buildAck(now, pl.idx)
			if ob.batch == nil {
				break
			}
			obs[nob] = ob
			nob++
		}
	} else if len(c.ackList) > 0 && !c.ackPending {
		c.ackPending = true
		c.ackDue = now.Add(maxAckDelay)
		wake = true
	}
	if nob > 0 {
		c.lastSend = now
	}
	if len(data) > 0 {
		c.flushData(data)
	} else {
		c.mu.Unlock()
	}
	for _, ob := range obs[:nob] {
		pl.ackTx.add(ob) // sent together after the batch (handleBatch)
	}
	if wake {
		c.wakeSender()
	}
	c.mu.Lock()
	perr := c.protoErr
	c.mu.Unlock()
	if perr != nil {
		c.abort(perr, true)
	}
}

// buildAck builds one ACK datagram for the paths in c.ackList; c.mu held.
func (c *Conn) buildAck(now time.Time, pref int) outBatch {
	plane := c.anyPlane(pref)
	if plane < 0 {
		return outBatch{}
	}
	a := wire.Ack{DstConnID: c.peerID, MaxData: c.maxData(), RateGrant: c.rateGrant()}
	if c.nak {
		a.Flags = wire.FlagNAK
		c.nak = false
	}
	var blocks [maxAckBlocks]wire.PathAck
	n := 0
	for n < c.ackBlocks && len(c.ackList) > 0 {
		rp := c.ackList[len(c.ackList)-1]
		c.ackList[len(c.ackList)-1] = nil
		c.ackList = c.ackList[:len(c.ackList)-1]
		rp.listed = false
		if c.mode == ModeGBN {
			rp.inorder.FillAck(rp.id, now, &blocks[n])
			n++
			continue
		}
		if rp.sack.FillAck(rp.id, wire.SackBits/64, now, &blocks[n]) {
			n++
		}
	}
	a.Blocks = blocks[:n]
	c.markSpoke(now, plane)
	port := c.t.planes[plane].port
	b := port.Pool().Get()
	pk := b.Next()
	pk.Buf = a.Append(pk.Buf)
	pk.Addr = c.peerAddrs[plane]
	return outBatch{port: port, batch: b, pack: c.dgram}
}

// buildControlAck builds an ACK without blocks carrying fresh credit, on
// the planes in turn.
func (c *Conn) buildControlAck() outBatch {
	c.keepPlane = (c.keepPlane + 1) % len(c.peerAddrs)
	return c.buildKeepalive(c.cfg.clock.Now(), c.keepPlane)
}

// buildKeepalive builds an ACK without blocks on plane pref (on another
// if the peer has no address there).
func (c *Conn) buildKeepalive(now time.Time, pref int) outBatch {
	if c.peerID == 0 {
		return outBatch{}
	}
	plane := c.anyPlane(pref)
	if plane < 0 {
		return outBatch{}
	}
	c.markSpoke(now, plane)
	a := wire.Ack{DstConnID: c.peerID, MaxData: c.maxData(), RateGrant: c.rateGrant()}
	port := c.t.planes[plane].port
	b := port.Pool().Get()
	pk := b.Next()
	pk.Buf = a.Append(pk.Buf)
	pk.Addr = c.peerAddrs[plane]
	return outBatch{port: port, batch: b, pack: c.dgram}
}
