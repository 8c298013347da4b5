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
			co.add(outBatch{port, bt})
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
