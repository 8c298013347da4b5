package transport

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/multiplane/multiplane/transport/internal/ioengine"
	"github.com/multiplane/multiplane/transport/internal/protocol"
	"github.com/multiplane/multiplane/transport/internal/wire"
)

// The batches of many connections leave in full batches, one partial one
// per port at the flush, each port's datagrams in the order they were added.
func TestCoalescerSendsFullBatchesInOrder(t *testing.T) {
	loop := netip.MustParseAddrPort("127.0.0.1:0")
	cfg := ioengine.Config{BatchSize: 64, BufferSize: 1500}
	listen := func() *ioengine.Port {
		p, err := ioengine.Listen(loop, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	rx, a, b := listen(), listen(), listen()
	var mu sync.Mutex
	got := map[netip.AddrPort][]string{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go rx.Run(ctx, func(bt *ioengine.Batch) {
		mu.Lock()
		defer mu.Unlock()
		for _, pk := range bt.Pkts {
			got[pk.Addr] = append(got[pk.Addr], string(pk.Buf))
		}
	})

	tr := &Transport{}
	tr.cfg.Logger = slog.New(slog.DiscardHandler)
	co := coalescer{t: tr, msg: "send failed"}
	var want [2][]string
	ports := [2]*ioengine.Port{a, b}
	const conns = 10
	for c := range conns {
		for i, port := range ports {
			bt := port.Pool().Get()
			for k := range 10 - 7*i { // 10 datagrams on a, 3 on b
				s := fmt.Sprintf("conn %d datagram %d", c, k)
				pk := bt.Next()
				pk.Buf = append(pk.Buf, s...)
				pk.Addr = rx.LocalAddr()
				want[i] = append(want[i], s)
			}
			co.add(outBatch{port: port, batch: bt})
		}
	}
	if s := a.Stats(); s.TxBatches != 1 || s.TxPackets != 64 {
		t.Errorf("before the flush port a sent %d datagrams in %d calls, want the one full batch of 64", s.TxPackets, s.TxBatches)
	}
	if s := b.Stats(); s.TxBatches != 0 {
		t.Errorf("before the flush port b sent %d calls, want none (30 datagrams held)", s.TxBatches)
	}
	if co.n != 36+30 {
		t.Errorf("held %d datagrams, want 66", co.n)
	}
	co.flush()
	if co.n != 0 || len(co.out) != 0 {
		t.Errorf("after the flush %d datagrams in %d batches are held", co.n, len(co.out))
	}
	for i, port := range ports {
		if s := port.Stats(); s.TxPackets != uint64(len(want[i])) || s.TxBatches != uint64((len(want[i])+63)/64) {
			t.Errorf("port %d sent %d datagrams in %d calls, want %d in %d", i, s.TxPackets, s.TxBatches, len(want[i]), (len(want[i])+63)/64)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(got[a.LocalAddr()]) + len(got[b.LocalAddr()])
		mu.Unlock()
		if n == len(want[0])+len(want[1]) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, port := range ports {
		if fmt.Sprint(got[port.LocalAddr()]) != fmt.Sprint(want[i]) {
			t.Errorf("port %d delivered %q, want %q", i, got[port.LocalAddr()], want[i])
		}
	}
}

// ACKs to one address share datagrams up to the batch's pack size; ACKs
// to another address, and data, keep their own datagrams and their order.
func TestCoalescerPacksAcksPerAddress(t *testing.T) {
	loop := netip.MustParseAddrPort("127.0.0.1:0")
	port, err := ioengine.Listen(loop, ioengine.Config{BatchSize: 64, BufferSize: 1500})
	if err != nil {
		t.Fatal(err)
	}
	defer port.Close()
	peerA := netip.MustParseAddrPort("127.0.0.1:9")
	peerB := netip.MustParseAddrPort("127.0.0.2:9")
	tr := &Transport{}
	tr.cfg.Logger = slog.New(slog.DiscardHandler)
	co := coalescer{t: tr, msg: "send failed"}
	ack := func(id protocol.ConnectionID, to netip.AddrPort, n int) outBatch {
		bt := port.Pool().Get()
		for range n {
			pk := bt.Next()
			pk.Buf = (&wire.Ack{DstConnID: id, Blocks: []wire.PathAck{{PathID: 1, Cumulative: 1, Largest: 2}}}).Append(pk.Buf)
			pk.Addr = to
		}
		return outBatch{port: port, batch: bt, pack: 1472}
	}
	data := port.Pool().Get()
	pk := data.Next()
	pk.Buf, pk.Addr = append(pk.Buf, "data"...), peerA
	co.add(ack(1, peerA, 2)) // packed in place: one datagram
	co.add(outBatch{port: port, batch: data})
	for id := range protocol.ConnectionID(40) {
		ob := ack(10+id, peerA, 1)
		if id == 20 { // a connection's turn adds data to the batch it holds
			pk := ob.batch.Next()
			pk.Buf, pk.Addr = append(pk.Buf, "tail"...), peerA
		}
		co.add(ob)
		co.add(ack(100+id, peerB, 1))
	}
	pkts := co.out[0].batch.Pkts
	var toA, toB []int // ACKs per datagram
	var order []protocol.ConnectionID
	for i, pk := range pkts {
		if string(pk.Buf) == "data" {
			if i != 1 {
				t.Errorf("data is datagram %d, want 1 (after the first ACK)", i)
			}
			continue
		}
		if string(pk.Buf) == "tail" {
			continue
		}
		k := 0
		for buf := pk.Buf; len(buf) > 0; k++ {
			n, err := wire.AckLength(buf)
			if err != nil {
				t.Fatalf("datagram %d: %v", i, err)
			}
			a, err := wire.ParseAck(buf[:n], nil)
			if err != nil {
				t.Fatalf("datagram %d: %v", i, err)
			}
			if pk.Addr == peerA {
				order = append(order, a.DstConnID)
			}
			buf = buf[n:]
		}
		if len(pk.Buf) > 1472 {
			t.Errorf("datagram %d of %d bytes, over the pack size", i, len(pk.Buf))
		}
		if pk.Addr == peerA {
			toA = append(toA, k)
		} else {
			toB = append(toB, k)
		}
	}
	per := 1472 / int((&wire.Ack{Blocks: make([]wire.PathAck, 1)}).Length())
	if len(toA) != (42+per-1)/per || len(toB) != (40+per-1)/per {
		t.Errorf("ACKs per datagram to A %v, to B %v: want %d per datagram", toA, toB, per)
	}
	for i := 1; i < len(order); i++ {
		if order[i] < order[i-1] {
			t.Fatalf("ACKs to A out of order: %v", order)
		}
	}
	if len(order) != 42 {
		t.Errorf("%d ACKs to A, want 42", len(order))
	}
	co.flush()
}
