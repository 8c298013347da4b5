package transport

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/multiplane/multiplane/fabricsim/userspace"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
)

// BenchmarkFabricGoodput streams 64 KiB messages for one second over a
// userspace fabric of 4 planes and reports goodput as a share of the line
// rate, at 0% and 1% random loss: an in-process stand-in for the netns
// benchmark (the relays share the two cores with both endpoints, so the
// rate is kept low).
func BenchmarkFabricGoodput(b *testing.B) {
	for _, rate := range []int64{50e6, 100e6} {
		for _, loss := range []float64{0, 0.01} {
			for _, mode := range []Mode{ModeMultipath, ModeGBN} {
				if mode == ModeGBN && loss == 0 {
					continue
				}
				b.Run(fmt.Sprintf("4x%dM/loss%v/%v", rate/1e6, loss, mode), func(b *testing.B) {
					fp := startFabricB(b, planesOf(4, userspace.PlaneConfig{RateBps: rate, Loss: loss}), Config{Mode: mode, PollMode: benchPoll})
					var bytes int64
					var el time.Duration
					cpu0 := cpuTime()
					for i := 0; i < b.N; i++ {
						n, d := stream(b, fp.ca, fp.cb, time.Second)
						bytes += n
						el += d
					}
					gp := float64(bytes) * 8 / el.Seconds()
					b.ReportMetric(gp/1e6, "Mbit/s")
					b.ReportMetric(100*gp/float64(4*rate), "%line")
					st := fp.ca.Stats()
					b.ReportMetric(float64(st.Retransmits)/float64(st.PacketsSent)*100, "%retx")
					b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(st.PacketsSent), "cpu-µs/pkt")
				})
			}
		}
	}
}

func startFabricB(b *testing.B, planes []userspace.PlaneConfig, cfg Config) *fabricPair {
	ctx := testenv.Context(b)
	f, err := userspace.Start(ctx, userspace.Config{Hosts: 2, Port: testutil.FabricPort(b, 2, len(planes)), Planes: planes})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	ca, cb := cfg, cfg
	var peer []netip.AddrPort
	for p := range planes {
		ca.Local = append(ca.Local, f.ListenAddr(0, p))
		cb.Local = append(cb.Local, f.ListenAddr(1, p))
		peer = append(peer, f.PeerAddr(1, p))
	}
	x, err := Listen(ca)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { x.Close() })
	y, err := Listen(cb)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { y.Close() })
	c1, c2 := pair(b, ctx, x, y, peer)
	return &fabricPair{f: f, a: x, b: y, ca: c1, cb: c2}
}

// stream sends 64 KiB messages with 64 in flight for d and returns the
// bytes the receiver got during the measured window after a warm-up.
func stream(b *testing.B, ca, cb *Conn, d time.Duration) (int64, time.Duration) {
	ctx, cancel := context.WithCancel(testenv.Context(b))
	defer cancel()
	msg := make([]byte, 64<<10)
	go func() {
		var comps []*Completion
		for ctx.Err() == nil {
			c, err := ca.SendAsync(ctx, msg)
			if err != nil {
				return
			}
			comps = append(comps, c)
			if len(comps) >= 64 {
				_ = comps[0].Wait(ctx)
				comps = comps[1:]
			}
		}
	}()
	warm := 300 * time.Millisecond
	var start time.Time
	var n0, n int64
	begin := time.Now()
	for {
		m, err := cb.Recv(ctx)
		if err != nil {
			b.Fatal(err)
		}
		n += int64(len(m))
		now := time.Now()
		if start.IsZero() && now.Sub(begin) >= warm {
			start, n0 = now, n
		}
		if !start.IsZero() && now.Sub(start) >= d {
			return n - n0, now.Sub(start)
		}
	}
}

var benchPoll = PollAdaptive
