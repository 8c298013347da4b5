package kv

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/metadata"
)

// BenchmarkWatchFanout is the floor under delivering a generation key to
// every agent: one put on a key that n watchers follow, each on its own
// gRPC stream beside a second watch (its own document) as agent.Agent
// watches, over 8 shared clients, and nothing else running. One op is
// one put and its delivery to all watchers; p50-ms and p99-ms are the
// watchers' delivery latencies, medians over the ops
// (docs/benchmarks/convergence-16000.md).
func BenchmarkWatchFanout(b *testing.B) {
	for _, n := range []int{4000, 16000} {
		b.Run(fmt.Sprintf("watchers=%d", n), func(b *testing.B) { benchFanout(b, n) })
	}
}

func benchFanout(b *testing.B, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e, err := StartEmbedded(ctx, b.TempDir(), EmbeddedOptions{}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	var clients []*clientv3.Client
	for range 8 {
		c, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	const key = "/bench/fanout/generation"
	got := make([]time.Time, n)
	var delivered sync.WaitGroup
	var created sync.WaitGroup
	for i := range n {
		wctx := metadata.AppendToOutgoingContext(ctx, "bench-watch", fmt.Sprint(i))
		c := clients[i%len(clients)]
		ch := c.Watch(wctx, key, clientv3.WithCreatedNotify())
		own := c.Watch(wctx, fmt.Sprintf("/bench/fanout/endpoint/%d", i), clientv3.WithCreatedNotify())
		created.Add(2)
		go func() {
			for r := range own {
				if r.Created {
					created.Done()
				}
			}
		}()
		go func() {
			for r := range ch {
				switch {
				case r.Created:
					created.Done()
				case len(r.Events) > 0:
					got[i] = time.Now()
					delivered.Done()
				}
			}
		}()
	}
	created.Wait()
	var p50, p99 []float64
	lat := make([]float64, n)
	b.ResetTimer()
	for i := range b.N {
		delivered.Add(n)
		put := time.Now()
		if _, err := clients[0].Put(ctx, key, fmt.Sprintf(`{"generation":%d}`, i)); err != nil {
			b.Fatal(err)
		}
		delivered.Wait()
		for j, t := range got {
			lat[j] = float64(t.Sub(put)) / float64(time.Millisecond)
		}
		slices.Sort(lat)
		p50 = append(p50, lat[n/2])
		p99 = append(p99, lat[n*99/100])
	}
	b.StopTimer()
	slices.Sort(p50)
	slices.Sort(p99)
	b.ReportMetric(p50[len(p50)/2], "p50-ms")
	b.ReportMetric(p99[len(p99)/2], "p99-ms")
}
