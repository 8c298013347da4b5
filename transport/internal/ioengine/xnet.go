package ioengine

import (
	"errors"
	"net"
	"os"
	"runtime"

	"golang.org/x/net/ipv4"
)

// xnetBatcher uses golang.org/x/net/ipv4 ReadBatch/WriteBatch: portable,
// batched on Linux, one datagram per call elsewhere.
type xnetBatcher struct {
	conn *net.UDPConn
	pc   *ipv4.PacketConn
	port *Port
	rx   []ipv4.Message
	tx   []ipv4.Message
	addr []net.UDPAddr
}

func newXNetBatcher(conn *net.UDPConn, p *Port, n int) *xnetBatcher {
	x := &xnetBatcher{conn: conn, pc: ipv4.NewPacketConn(conn), port: p,
		rx: make([]ipv4.Message, n), tx: make([]ipv4.Message, n), addr: make([]net.UDPAddr, n)}
	for i := range x.rx {
		x.rx[i].Buffers = make([][]byte, 1)
		x.tx[i].Buffers = make([][]byte, 1)
	}
	return x
}

func (x *xnetBatcher) read(b *Batch, block bool) (int, error) {
	for i := range x.rx {
		x.rx[i].Buffers[0] = b.all[i].buf
	}
	// A past deadline would fail before even trying the socket, so the
	// portable engine always blocks: every poll mode behaves as blocking.
	n, err := x.pc.ReadBatch(x.rx, 0)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return 0, nil
		}
		return 0, err
	}
	b.Pkts = b.all[:n]
	for i := 0; i < n; i++ {
		pk := &b.Pkts[i]
		pk.Buf = pk.buf[:x.rx[i].N]
		pk.TOS, pk.RxTime = 0, 0
		if ua, ok := x.rx[i].Addr.(*net.UDPAddr); ok {
			pk.Addr = ua.AddrPort()
		}
		x.port.c.rxBytes.Add(uint64(x.rx[i].N))
	}
	return n, nil
}

func (x *xnetBatcher) write(b *Batch) error {
	ms := x.tx[:len(b.Pkts)]
	for i := range ms {
		pk := &b.Pkts[i]
		ms[i].Buffers[0] = pk.Buf
		a := &x.addr[i]
		ip := pk.Addr.Addr().As16()
		if pk.Addr.Addr().Is4() {
			a.IP = append(a.IP[:0], ip[12:]...)
		} else {
			a.IP = append(a.IP[:0], ip[:]...)
		}
		a.Port = int(pk.Addr.Port())
		ms[i].Addr = a
	}
	for len(ms) > 0 {
		n, err := x.pc.WriteBatch(ms, 0)
		if err != nil {
			x.port.c.txErrors.Add(1)
			if n <= 0 {
				n = 1 // skip the failing datagram
			}
		}
		x.port.c.txBatches.Add(1)
		for _, m := range ms[:n] {
			x.port.c.txBytes.Add(uint64(len(m.Buffers[0])))
		}
		x.port.c.txPackets.Add(uint64(n))
		ms = ms[n:]
	}
	return nil
}

func yield() { runtime.Gosched() }
