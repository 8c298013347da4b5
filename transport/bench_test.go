package transport

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/multiplane/multiplane/internal/testenv"
)

// BenchmarkTransfer moves messages over 4 loopback planes. One op is one
// message (46 data packets at 1472-byte datagrams for 64 KiB, 2909 for 4
// MiB). allocs/pkt is the heap allocations per data packet: all of them
// are per-message objects (completion, bookkeeping), so it falls with the
// message size; the packet path itself allocates nothing.
func BenchmarkTransfer(b *testing.B) {
	for _, bc := range []struct {
		mode Mode
		size int
	}{{ModeMultipath, 64 << 10}, {ModeGBN, 64 << 10}, {ModeMultipath, 4 << 20}} {
		mode, size := bc.mode, bc.size
		b.Run(fmt.Sprintf("%v/%dKiB", mode, size>>10), func(b *testing.B) {
			ctx := testenv.Context(b)
			cfg := Config{Local: loopbackAddrs(4), Mode: mode, MinRTO: benchMinRTO}
			cfg.Logger = nil
			a, err := Listen(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			bt, err := Listen(Config{Local: loopbackAddrs(4)})
			if err != nil {
				b.Fatal(err)
			}
			defer bt.Close()
			ca, cb := pair(b, ctx, a, bt, bt.LocalAddrs())
			msg := make([]byte, size)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; i < b.N; i++ {
					m, err := cb.Recv(ctx)
					if err != nil {
						b.Error(err)
						return
					}
					cb.Recycle(m)
				}
			}()
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			cpu0 := cpuTime()
			b.ReportAllocs()
			b.SetBytes(int64(size))
			b.ResetTimer()
			var comps []*Completion
			for i := 0; i < b.N; i++ {
				c, err := ca.SendAsync(ctx, msg)
				if err != nil {
					b.Fatal(err)
				}
				comps = append(comps, c)
				if len(comps) >= 64<<20/size {
					if err := comps[0].Wait(ctx); err != nil {
						b.Fatal(err)
					}
					comps = comps[1:]
				}
			}
			for _, c := range comps {
				if err := c.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
			<-done
			b.StopTimer()
			runtime.ReadMemStats(&ms1)
			st := ca.Stats()
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(st.PacketsSent), "cpu-µs/pkt")
			b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(st.PacketsSent), "allocs/pkt")
			b.ReportMetric(float64(st.Retransmits)/float64(st.PacketsSent)*100, "%retx")
			var acks, kdrops uint64
			for _, p := range bt.Stats().Planes {
				acks += p.TxPackets
				kdrops += p.KernelDrops
			}
			for _, p := range a.Stats().Planes {
				kdrops += p.KernelDrops
				b.ReportMetric(float64(p.TxErrors), "txerr")
			}
			b.ReportMetric(float64(kdrops), "kdrops")
			b.ReportMetric(float64(st.Timeouts), "timeouts")
			b.ReportMetric(float64(st.SpuriousRetransmits)/float64(st.PacketsSent)*100, "%spurious")
			b.ReportMetric(float64(acks)/float64(st.PacketsSent), "acks/pkt")
			_ = context.Background
		})
	}
}

// cpuTime returns the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchMinRTO overrides Config.MinRTO in BenchmarkTransfer (0: default).
var benchMinRTO time.Duration
