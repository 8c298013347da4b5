package agent

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/kv/kvtest"
)

var (
	scaleAgents  = flag.Int("agents", 100, "agents in TestManyAgentsConverge")
	scaleClients = flag.Int("agent-clients", 2, "etcd clients the agents of TestManyAgentsConverge share")
	scaleShared  = flag.Bool("shared-lease", false, "TestManyAgentsConverge: one status lease for all agents")
	scaleExtEtcd = flag.Bool("etcd-process", false, "TestManyAgentsConverge: run etcd in a child process, so the footprint is the agents' alone")
	scaleStreams = flag.Int("agent-streams", 0, "TestManyAgentsConverge: watch streams the agents share (0: one per agent)")
)

// publish writes every endpoint's document at gen in transactions of at
// most 64 operations, then the generation key, as the leader does. It
// returns when it started writing the generation key.
func publish(t testing.TB, cli *clientv3.Client, names []string, gen uint64) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for chunk := range slices.Chunk(names, 64) {
		ops := make([]clientv3.Op, len(chunk))
		for i, n := range chunk {
			ops[i] = clientv3.OpPut(contract.KeyEndpoint(n), mustJSON(t, doc(n, gen)))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	genAt := time.Now()
	putGen(t, cli, gen)
	return genAt
}

type footprint struct {
	goroutines int
	heap       uint64
}

func measure() footprint {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return footprint{goroutines: runtime.NumGoroutine(), heap: m.HeapInuse + m.StackInuse}
}

// Many agents in one process, on a few shared etcd clients, converge on a
// new generation. Figures: go test ./agent -run ManyAgents -v -agents 4000.
func TestManyAgentsConverge(t *testing.T) {
	n := *scaleAgents
	var endpoints []string
	if *scaleExtEtcd {
		endpoints = startEtcdProcess(t)
	} else {
		endpoints = kvtest.New(t).Endpoints()
	}
	admin := newClient(t, endpoints)
	clients := make([]*clientv3.Client, *scaleClients)
	for i := range clients {
		clients[i] = newClient(t, endpoints)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("host-%05d", i)
	}
	publish(t, admin, names, 1)

	var lease clientv3.LeaseID
	if *scaleShared {
		ctx := testenv.Context(t)
		resp, err := admin.Grant(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		ka, err := admin.KeepAlive(ctx, resp.ID)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for range ka {
			}
		}()
		lease = resp.ID
	}

	stream := func(i int) string {
		if *scaleStreams == 0 {
			return ""
		}
		return fmt.Sprint(i % *scaleStreams)
	}
	before := measure()
	appliedAt := make([]atomic.Int64, n) // unix nanos of generation 2
	var at1 atomic.Int64
	recs := make([]*recorder, n)
	quiet := slogDiscard()
	for i, name := range names {
		recs[i] = &recorder{}
		cfg := Config{
			Endpoint: name, Client: clients[i%len(clients)], Planes: 4, Lease: lease, WatchStream: stream(i),
			StatusInterval: DefaultStatusInterval, LeaseTTL: DefaultLeaseTTL,
			OnApplied: func(gen uint64, at time.Time) {
				switch gen {
				case 1:
					at1.Add(1)
				case 2:
					appliedAt[i].Store(at.UnixNano())
				}
			},
		}
		a, err := New(cfg, recs[i], quiet)
		if err != nil {
			t.Fatal(err)
		}
		start(t, a)
	}
	t0 := time.Now()
	testutil.WaitFor(t, 120*time.Second, "every agent on generation 1", func() bool { return at1.Load() == int64(n) })
	t.Logf("%d agents started and applied generation 1 in %v", n, time.Since(t0).Round(time.Millisecond))
	testutil.WaitFor(t, 120*time.Second, "every status written", func() bool {
		resp, err := admin.Get(context.Background(), contract.PrefixStatus, clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == int64(n)
	})
	after := measure()
	what := "agent + client + in-process etcd server"
	if *scaleExtEtcd {
		what = "agent + its share of the clients"
	}
	t.Logf("footprint per agent (%s): %.1f goroutines, %.1f KiB heap+stack", what,
		float64(after.goroutines-before.goroutines)/float64(n), float64(after.heap-before.heap)/float64(n)/1024)

	// fabricd's view: when each agent's status says generation 2.
	reported := map[string]time.Time{}
	var lastReport atomic.Int64
	wctx, wcancel := context.WithCancel(context.Background())
	wch := admin.Watch(wctx, contract.PrefixStatus, clientv3.WithPrefix())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for resp := range wch {
			for _, ev := range resp.Events {
				var st contract.StatusDoc
				if json.Unmarshal(ev.Kv.Value, &st) == nil && st.AppliedGeneration == 2 {
					if _, ok := reported[st.Endpoint]; !ok {
						reported[st.Endpoint] = time.Now()
						if len(reported) == n {
							lastReport.Store(time.Now().UnixNano())
						}
					}
				}
			}
		}
	}()
	t.Cleanup(func() { wcancel(); <-watched })

	start2 := time.Now()
	genAt := publish(t, admin, names, 2)
	testutil.WaitFor(t, 120*time.Second, "every agent on generation 2", func() bool {
		for i := range appliedAt {
			if appliedAt[i].Load() == 0 {
				return false
			}
		}
		return true
	})
	lat := make([]time.Duration, n)
	for i := range appliedAt {
		lat[i] = time.Unix(0, appliedAt[i].Load()).Sub(genAt)
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(n-1, int(p*float64(n)))].Round(10 * time.Microsecond) }
	t.Logf("%d agents: writing %d documents took %v; from the generation key write to apply: p50 %v p99 %v max %v",
		n, n, genAt.Sub(start2).Round(time.Millisecond), q(0.5), q(0.99), lat[n-1].Round(10*time.Microsecond))
	testutil.WaitFor(t, 60*time.Second, "every status on generation 2", func() bool { return lastReport.Load() != 0 })
	t.Logf("every status in etcd on generation 2 %v after the generation key write", time.Unix(0, lastReport.Load()).Sub(genAt).Round(time.Millisecond))
	for i, r := range recs {
		if got := r.generations(); !slices.Equal(got, []uint64{1, 2}) {
			t.Fatalf("agent %d applied %v, want [1 2]", i, got)
		}
	}
}

// BenchmarkApply measures one agent's round trip: the leader writes a
// document and the generation key; the agent sees both, validates and
// applies. apply-ns is from the generation key's write to Apply.
func BenchmarkApply(b *testing.B) {
	s := kvtest.New(b)
	applied := make(chan time.Time, 1)
	a, err := New(Config{
		Endpoint: "host-a", Client: s.Client, Planes: 4, StatusInterval: time.Minute,
		OnApplied: func(_ uint64, at time.Time) { applied <- at },
	}, &recorder{}, slogDiscard())
	if err != nil {
		b.Fatal(err)
	}
	putDoc(b, s.Client, doc("host-a", 1))
	putGen(b, s.Client, 1)
	start(b, a)
	<-applied
	var total time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		gen := uint64(i + 2)
		putDoc(b, s.Client, doc("host-a", gen))
		t0 := time.Now()
		putGen(b, s.Client, gen)
		total += (<-applied).Sub(t0)
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "apply-ns")
}
