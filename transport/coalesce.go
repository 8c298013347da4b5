package transport

import (
	"github.com/multiplane/multiplane/transport/internal/ioengine"
	"github.com/multiplane/multiplane/transport/internal/protocol"
	"github.com/multiplane/multiplane/transport/internal/wire"
)

// coalescer gathers batches bound for the same ports into full ones, so
// the datagrams of many connections leave in few send calls: a receiver
// of 4,000 connections acked each in its own call (one datagram per call),
// and a sender's workers wrote each connection's turn in its own calls.
type coalescer struct {
	t   *Transport
	msg string     // logged when a send fails
	out []outBatch // at most one per port
	n   int        // datagrams held
}

// add takes ob's datagrams (ob's batch is consumed); full batches leave
// at once.
func (co *coalescer) add(ob outBatch) {
	if ob.batch == nil {
		return
	}
	i := 0
	for i < len(co.out) && co.out[i].port != ob.port {
		i++
	}
	if i == len(co.out) {
		if ob.pack > 0 {
			packInPlace(ob.batch, ob.pack)
		}
		co.out = append(co.out, outBatch{port: ob.port, batch: ob.batch})
		co.n += len(ob.batch.Pkts)
		co.sendIfFull(i)
		return
	}
	cur := &co.out[i]
	for k := range ob.batch.Pkts {
		pk := &ob.batch.Pkts[k]
		if ob.pack > 0 && packInto(cur.batch.Pkts, len(cur.batch.Pkts), pk, ob.pack) {
			continue
		}
		np := cur.batch.Next()
		np.Buf = append(np.Buf, pk.Buf...)
		np.Addr = pk.Addr
		co.n++
		co.sendIfFull(i)
	}
	ob.batch.Release()
}

// packScan is how many of a batch's last datagrams packInto looks at.
const packScan = 16

// packInto appends pk, if it is an ACK datagram, to one of the last
// datagrams of pkts[:n] that holds ACKs to the same address and has room
// for it within limit bytes (wire.AckLength: ACKs may share a datagram),
// and reports whether it did. A batch built as ACKs may carry data too (a
// connection's turn adds its data to the batches it holds per port).
func packInto(pkts []ioengine.Packet, n int, pk *ioengine.Packet, limit protocol.ByteCount) bool {
	if !isAck(pk.Buf) {
		return false
	}
	for j := n - 1; j >= 0 && j >= n-packScan; j-- {
		q := &pkts[j]
		if q.Addr != pk.Addr || !isAck(q.Buf) {
			continue
		}
		if size := len(q.Buf) + len(pk.Buf); size <= int(limit) && size <= cap(q.Buf) {
			q.Buf = append(q.Buf, pk.Buf...)
			return true
		}
	}
	return false
}

// packInPlace packs a batch's ACK datagrams to the same address into as
// few datagrams as limit allows, keeping the order of the others.
func packInPlace(b *ioengine.Batch, limit protocol.ByteCount) {
	w := 0
	for r := range b.Pkts {
		if packInto(b.Pkts, w, &b.Pkts[r], limit) {
			continue
		}
		b.Pkts[w], b.Pkts[r] = b.Pkts[r], b.Pkts[w]
		w++
	}
	b.Pkts = b.Pkts[:w]
}

func isAck(buf []byte) bool {
	typ, err := wire.PeekType(buf)
	return err == nil && typ == wire.TypeAck
}

func (co *coalescer) sendIfFull(i int) {
	cur := &co.out[i]
	if !cur.batch.Full() {
		return
	}
	co.n -= len(cur.batch.Pkts)
	co.t.sendOut(*cur, co.msg, 0)
	cur.batch = cur.port.Pool().Get()
}

// flush sends what is held.
func (co *coalescer) flush() {
	for i, ob := range co.out {
		if len(ob.batch.Pkts) > 0 {
			co.t.sendOut(ob, co.msg, 0)
		} else {
			ob.batch.Release()
		}
		co.out[i] = outBatch{}
	}
	co.out = co.out[:0]
	co.n = 0
}
