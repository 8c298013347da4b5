package ioengine

import (
	"context"
	"encoding/binary"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var loopback = netip.MustParseAddrPort("127.0.0.1:0")

func listen(t testing.TB, cfg Config) *Port {
	t.Helper()
	p, err := Listen(loopback, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// run starts p's poll loop and returns a wait function.
func run(t testing.TB, p *Port, handle func(*Batch)) {
	t.Helper()
	ctx, cancel := context.WithCancel(testenv.Context(t))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := p.Run(ctx, handle); err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// TestRunAllPollsEveryPort: one goroutine takes each port's datagrams and
// tells which port they came in on; closing a port ends it.
func TestRunAllPollsEveryPort(t *testing.T) {
	cfg := Config{Mode: PollBusy, BatchSize: 8}
	ports := []*Port{listen(t, cfg), listen(t, cfg), listen(t, cfg)}
	tx := listen(t, cfg)
	var mu sync.Mutex
	got := make([]map[uint32]bool, len(ports))
	for i := range got {
		got[i] = map[uint32]bool{}
	}
	done := make(chan error, 1)
	go func() {
		done <- RunAll(testenv.Context(t), ports, func(i int, b *Batch) {
			mu.Lock()
			defer mu.Unlock()
			for _, pk := range b.Pkts {
				got[i][binary.BigEndian.Uint32(pk.Buf)] = true
			}
		})
	}()
	const per = 50
	for i := range per * len(ports) {
		b := tx.Pool().Get()
		pk := b.Next()
		pk.Buf = binary.BigEndian.AppendUint32(pk.Buf, uint32(i))
		pk.Addr = ports[i%len(ports)].LocalAddr()
		if err := tx.Send(b); err != nil {
			t.Fatal(err)
		}
		b.Release()
	}
	testutil.WaitFor(t, 5*time.Second, "every datagram on its port", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range got {
			if len(got[i]) < per*9/10 {
				return false
			}
		}
		return true
	})
	mu.Lock()
	for i, m := range got {
		for seq := range m {
			if int(seq)%len(ports) != i {
				t.Errorf("datagram %d reported on port %d", seq, i)
			}
		}
	}
	mu.Unlock()
	ports[1].Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RunAll did not return after a port closed")
	}
}

func TestSendReceive(t *testing.T) {
	for _, mode := range []PollMode{PollAdaptive, PollBusy, PollBlocking} {
		for _, variant := range []string{"raw", "gso", "portable"} {
			portable, gso := variant == "portable", variant == "gso"
			t.Run(mode.String()+"/"+variant, func(t *testing.T) {
				cfg := Config{Mode: mode, ECN: true, Portable: portable, GSO: gso, BatchSize: 16}
				rx, tx := listen(t, cfg), listen(t, cfg)
				const total = 1000
				var got atomic.Int64
				seen := make([]bool, total)
				var mu sync.Mutex
				var tosOK atomic.Bool
				var badTime atomic.Int64 // raw engine: kernel timestamps outside the test
				start := time.Now().UnixNano()
				run(t, rx, func(b *Batch) {
					mu.Lock()
					defer mu.Unlock()
					for _, pk := range b.Pkts {
						if len(pk.Buf) != 1000 || pk.Addr != tx.LocalAddr() {
							t.Errorf("datagram %d bytes from %v", len(pk.Buf), pk.Addr)
							continue
						}
						seen[binary.BigEndian.Uint32(pk.Buf)] = true
						if pk.TOS&3 == ECNECT0 {
							tosOK.Store(true)
						}
						if !portable && (pk.RxTime < start || pk.RxTime > time.Now().UnixNano()) {
							badTime.Add(1)
						}
						got.Add(1)
					}
				})
				for i := 0; i < total; {
					b := tx.Pool().Get()
					for ; i < total && !b.Full(); i++ {
						pk := b.Next()
						pk.Buf = binary.BigEndian.AppendUint32(pk.Buf, uint32(i))
						pk.Buf = pk.Buf[:1000]
						pk.Addr = rx.LocalAddr()
					}
					if err := tx.Send(b); err != nil {
						t.Fatal(err)
					}
					b.Release()
					if i%128 == 0 {
						testutil.WaitFor(t, 5*time.Second, "the receiver within 256 datagrams of the sender", func() bool { return got.Load() >= int64(i)-256 })
					}
				}
				testutil.WaitFor(t, 5*time.Second, "90% of the datagrams received", func() bool { return got.Load() >= total*9/10 })
				if !portable && !tosOK.Load() {
					t.Error("ECT(0) not seen on received datagrams")
				}
				if n := badTime.Load(); n > 0 {
					t.Errorf("%d datagrams without a kernel receive time inside the test", n)
				}
				st := tx.Stats()
				if st.TxPackets != total || st.TxBytes != total*1000 {
					t.Errorf("tx stats %+v", st)
				}
			})
		}
	}
}

// BenchmarkLoopback sends batches of 64 datagrams of 1472 bytes over
// loopback and receives them; one op is one datagram. allocs/op must be 0
// with the raw Linux engine.
func BenchmarkLoopback(b *testing.B) {
	for _, name := range []string{"raw", "gso", "xnet"} {
		b.Run(name, func(b *testing.B) {
			cfg := Config{Mode: PollBlocking, Portable: name == "xnet", GSO: name == "gso"}
			rx, tx := listen(b, cfg), listen(b, cfg)
			var got atomic.Int64
			run(b, rx, func(bt *Batch) { got.Add(int64(len(bt.Pkts))) })
			// Warm up the pools.
			sendN(b, tx, rx.LocalAddr(), 256, &got)
			b.ReportAllocs()
			b.SetBytes(1472)
			b.ResetTimer()
			sendN(b, tx, rx.LocalAddr(), b.N, &got)
			b.ReportMetric(float64(rx.Stats().KernelDrops), "kdrops")
			b.ReportMetric(float64(tx.Stats().TxBatches)/float64(tx.Stats().TxPackets), "syscalls/pkt")
		})
	}
}

func sendN(b *testing.B, tx *Port, dst netip.AddrPort, n int, got *atomic.Int64) {
	start := got.Load()
	sent := 0
	for sent < n {
		// Keep at most 512 datagrams ahead of the receiver (socket buffer).
		for int64(sent)-(got.Load()-start) > 512 {
			runtime.Gosched()
		}
		bt := tx.Pool().Get()
		for ; sent < n && !bt.Full(); sent++ {
			pk := bt.Next()
			pk.Buf = pk.Buf[:1472]
			pk.Addr = dst
		}
		if err := tx.Send(bt); err != nil {
			b.Fatal(err)
		}
		bt.Release()
	}
	deadline := time.Now().Add(2 * time.Second)
	for got.Load()-start < int64(n)*95/100 && time.Now().Before(deadline) {
		runtime.Gosched()
	}
}

// BenchmarkPacedReceive sends datagrams evenly spaced 60µs apart (one
// 1500-byte frame at 200 Mbit/s, as a shaped switch port delivers them) to
// a port and reports the process CPU per datagram and the wake-ups per
// datagram, for blocking and adaptive polling (which spins only where the
// process has a spin slot, see SpinSlots). The sender busy-waits for its
// pacing in both cases, so the difference is the receiver's.
func BenchmarkPacedReceive(b *testing.B) {
	for _, mode := range []PollMode{PollBlocking, PollAdaptive} {
		b.Run(mode.String(), func(b *testing.B) {
			rx, tx := listen(b, Config{Mode: mode}), listen(b, Config{Mode: PollBlocking})
			var got atomic.Int64
			run(b, rx, func(bt *Batch) { got.Add(int64(len(bt.Pkts))) })
			const gap = 60 * time.Microsecond
			n := max(b.N, 2000)
			cpu0 := cpuTime()
			start := time.Now()
			bt := tx.Pool().Get()
			for i := 0; i < n; i++ {
				for time.Since(start) < time.Duration(i)*gap {
				}
				pk := bt.Next()
				pk.Buf = pk.Buf[:1472]
				pk.Addr = rx.LocalAddr()
				if err := tx.Send(bt); err != nil {
					b.Fatal(err)
				}
				bt.Pkts = bt.Pkts[:0]
			}
			bt.Release()
			testutil.WaitFor(b, 5*time.Second, "99% of the datagrams received", func() bool { return got.Load() >= int64(n)*99/100 })
			cpu := cpuTime() - cpu0
			wall := time.Since(start)
			st := rx.Stats()
			// The sender spins the whole time: subtract one core of wall time.
			b.ReportMetric(float64((cpu-wall).Microseconds())/float64(n), "rx-cpu-µs/pkt")
			b.ReportMetric(float64(st.RxBatches)/float64(n), "wakeups/pkt")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
