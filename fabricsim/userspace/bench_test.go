package userspace

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
)

// BenchmarkRelay pushes 1400-byte datagrams from host 0 to host 1 over 4
// planes at once, each sender kept at most a window ahead of its receiver.
// One op is one datagram per plane. The Mbit/s metric is the delivered
// goodput summed over planes: with rate "4x100M" it must reach ~400.
func BenchmarkRelay(b *testing.B) {
	for _, bc := range []struct {
		name string
		rate int64
	}{{"unlimited", 0}, {"4x100M", 100e6}, {"4x200M", 200e6}} {
		b.Run(bc.name, func(b *testing.B) {
			const planes, size, window = 4, 1400, 256
			pcs := make([]PlaneConfig, planes)
			for i := range pcs {
				pcs[i] = PlaneConfig{RateBps: bc.rate, QueueBytes: 2 * window * size}
			}
			f := start(b, Config{Hosts: 2, Planes: pcs})
			b.ReportAllocs()
			b.SetBytes(planes * size)
			var wg sync.WaitGroup
			var delivered atomic.Int64
			begin := time.Now()
			b.ResetTimer()
			for p := range planes {
				a, r := newHost(b, f, 0, p), newHost(b, f, 1, p)
				var got atomic.Int64
				wg.Add(2)
				go func() {
					defer wg.Done()
					pc := ipv4.NewPacketConn(r.rx)
					ms := make([]ipv4.Message, 64)
					for i := range ms {
						ms[i].Buffers = [][]byte{make([]byte, 2048)}
					}
					for got.Load() < int64(b.N) {
						_ = r.rx.SetReadDeadline(time.Now().Add(10 * time.Second))
						n, err := pc.ReadBatch(ms, 0)
						if err != nil {
							b.Errorf("plane %d: read: %v after %d", p, err, got.Load())
							return
						}
						got.Add(int64(n))
						delivered.Add(int64(n * size))
					}
				}()
				go func() {
					defer wg.Done()
					pc := ipv4.NewPacketConn(a.tx)
					ms := make([]ipv4.Message, 32)
					dst := net.UDPAddrFromAddrPort(f.PeerAddr(1, p))
					for i := range ms {
						ms[i].Buffers = [][]byte{make([]byte, size)}
						ms[i].Addr = dst
					}
					for sent := 0; sent < b.N; {
						if int64(sent)-got.Load() > window-32 {
							time.Sleep(50 * time.Microsecond) // window full: back off briefly
							continue
						}
						k := min(len(ms), b.N-sent)
						n, err := pc.WriteBatch(ms[:k], 0)
						if err != nil {
							b.Errorf("write: %v", err)
							return
						}
						sent += n
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(delivered.Load()*8)/time.Since(begin).Seconds()/1e6, "Mbit/s")
		})
	}
}
