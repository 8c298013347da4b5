package publish_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/kv/kvtest"
	"github.com/multiplane/multiplane/policy"
	"github.com/multiplane/multiplane/policy/publish"
)

// output builds a policy output for n endpoints; skew takes h000's link
// on p1 down.
func output(n int, skew bool) policy.Output {
	var out policy.Output
	out.Planes = []contract.PlaneStatus{{Name: "p0", Index: 0, State: "healthy", CapacityRatio: 1}, {Name: "p1", Index: 1, State: "healthy", CapacityRatio: 1}}
	for i := 0; i < n; i++ {
		spec := contract.EndpointSpec{Endpoint: fmt.Sprintf("h%03d", i), Entropy: 4, DegradedLinkFactor: 0.5, Class: "default",
			Ports: []contract.SpecPort{{Plane: "p0", Index: 0, Address: fmt.Sprintf("10.0.0.%d", i+1)}, {Plane: "p1", Index: 1, Address: fmt.Sprintf("10.0.1.%d", i+1)}}}
		if skew && i == 0 {
			spec.Ports[1].Link = "down"
		}
		ps, rate := contract.Resolve(spec, out.Planes)
		out.Endpoints = append(out.Endpoints, policy.EndpointPolicy{Endpoint: spec.Endpoint, Spec: spec, PathSet: ps, Rate: rate})
	}
	return out
}

type source struct{ out atomic.Pointer[policy.Output] }

func (s *source) set(o policy.Output) { s.out.Store(&o) }
func (s *source) compute(context.Context) (publish.Input, error) {
	return publish.Input{Output: *s.out.Load(), TopologyRevision: 1}, nil
}

func start(t testing.TB, cli *clientv3.Client, id string, src *source, results chan publish.Result) (*publish.Publisher, context.CancelFunc) {
	cfg := publish.DefaultConfig()
	cfg.ID, cfg.MaxTxnOps, cfg.ParallelTxns, cfg.SessionTTL = id, 16, 2, 2
	p := publish.New(cli, cfg, testenv.Logger(t).With("replica", id))
	p.OnResult(func(r publish.Result) { results <- r })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx, src.compute); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return p, func() { cancel(); <-done }
}

func waitResult(t testing.TB, ch chan publish.Result) publish.Result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no publication within 20s")
	}
	return publish.Result{}
}

func generationOf(t *testing.T, cli *clientv3.Client, key string) (uint64, int64) {
	t.Helper()
	resp, err := cli.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("get %s: %v", key, err)
	}
	var g struct{ Generation uint64 }
	json.Unmarshal(resp.Kvs[0].Value, &g)
	return g.Generation, resp.Kvs[0].ModRevision
}

func TestPublishesChangedDocumentsThenGeneration(t *testing.T) {
	cli := kvtest.New(t).Client
	src := &source{}
	src.set(output(100, false))
	results := make(chan publish.Result, 10)
	p, _ := start(t, cli, "a", src, results)

	r := waitResult(t, results)
	// 100 endpoints + 100 directory entries + planes + ports + generation key.
	if r.Generation != 1 || r.Written != 203 || r.Txns != 14 {
		t.Fatalf("first publication = %+v", r)
	}
	gen, genRev := generationOf(t, cli, contract.KeyGeneration)
	docs, _ := cli.Get(context.Background(), contract.PrefixEndpoints, clientv3.WithPrefix())
	for _, kv := range docs.Kvs {
		if kv.ModRevision >= genRev {
			t.Fatalf("%s written after the generation key", kv.Key)
		}
	}
	if gen != 1 || !p.IsLeader() {
		t.Fatalf("generation %d leader %v", gen, p.IsLeader())
	}

	// Nothing changed: nothing written.
	p.Trigger()
	src.set(output(100, true)) // one endpoint changes
	p.Trigger()
	r = waitResult(t, results)
	// h000's document (its directory entry is the same), then the generation key.
	if r.Generation != 2 || r.Written != 2 {
		t.Fatalf("second publication = %+v", r)
	}
	if g, _ := generationOf(t, cli, contract.KeyEndpoint("h001")); g != 1 {
		t.Fatalf("unchanged h001 rewritten at generation %d", g)
	}
	if g, _ := generationOf(t, cli, contract.KeyEndpoint("h000")); g != 2 {
		t.Fatalf("h000 at generation %d, want 2", g)
	}
	if g := generationDoc(t, cli); !slices.Equal(g.Changed, []string{"h000"}) || g.ChangedAll || g.PlanesGeneration != 1 {
		t.Fatalf("generation document %+v: want h000 alone changed, planes of generation 1", g)
	}

	// A plane fails: its state and the generation key, no endpoint's
	// document (docs/etcd-layout.md, O(1) plane events).
	down := output(100, true)
	down.Planes[1].State, down.Planes[1].CapacityRatio = "down", 0
	src.set(down)
	p.Trigger()
	if r = waitResult(t, results); r.Generation != 3 || r.Written != 2 || r.Txns != 1 {
		t.Fatalf("plane-down publication = %+v, want the planes and generation keys in one transaction", r)
	}
	if g := generationDoc(t, cli); len(g.Changed) != 0 || g.ChangedAll || g.PlanesGeneration != 3 || g.Planes[1].State != "down" {
		t.Fatalf("generation document after plane down %+v", g)
	}

	src.set(output(90, true)) // ten endpoints leave
	p.Trigger()
	if r = waitResult(t, results); r.Deleted != 20 {
		t.Fatalf("fourth publication = %+v", r)
	}
	if g := generationDoc(t, cli); len(g.Changed) != 10 || g.Changed[0] != "h090" {
		t.Fatalf("generation document after deletions lists %v", g.Changed)
	}
}

func generationDoc(t *testing.T, cli *clientv3.Client) contract.GenerationDoc {
	t.Helper()
	resp, err := cli.Get(context.Background(), contract.KeyGeneration)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("get generation: %v", err)
	}
	var g contract.GenerationDoc
	if err := json.Unmarshal(resp.Kvs[0].Value, &g); err != nil {
		t.Fatal(err)
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestOneLeaderAndTakeover(t *testing.T) {
	store := kvtest.New(t)
	cliA, err := clientv3.New(clientv3.Config{Endpoints: store.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	cliB := store.Client
	src := &source{}
	src.set(output(10, false))
	resA, resB := make(chan publish.Result, 10), make(chan publish.Result, 10)
	a, _ := start(t, cliA, "a", src, resA)
	waitResult(t, resA)
	b, _ := start(t, cliB, "b", src, resB)

	src.set(output(10, true))
	a.Trigger()
	b.Trigger()
	waitResult(t, resA)
	if b.IsLeader() {
		t.Fatal("two leaders")
	}
	if !a.Recording() || b.Recording() {
		t.Fatalf("recording: leader %v, follower %v; want only the leader", a.Recording(), b.Recording())
	}
	select {
	case r := <-resB:
		t.Fatalf("follower published %+v", r)
	case <-time.After(200 * time.Millisecond):
	}

	// The leader dies without resigning: its lease must expire first.
	died := time.Now()
	cliA.Close()
	src.set(output(12, true))
	b.Trigger()
	r := waitResult(t, resB)
	took := time.Since(died)
	t.Logf("takeover after the leader died: %v (session TTL 2s)", took)
	if took > 2*time.Second+3*time.Second {
		t.Fatalf("takeover took %v", took)
	}
	if leader, _ := publish.Leader(context.Background(), cliB); leader != "b" || r.Generation != 3 {
		t.Fatalf("leader %q generation %d", leader, r.Generation)
	}
	if !b.Recording() {
		t.Fatal("the new leader does not record")
	}
}

// A leader killed between transactions leaves documents of a generation the
// generation key does not announce; the next leader completes a later one.
func TestCrashMidUpdateIsCompletedByNextLeader(t *testing.T) {
	store := kvtest.New(t)
	src := &source{}
	src.set(output(50, false))
	res := make(chan publish.Result, 10)
	a, stopA := start(t, store.Client, "a", src, res)
	waitResult(t, res)

	next := output(50, true)
	for i := range next.Endpoints { // every endpoint changes
		next.Endpoints[i].Spec.EgressBps = 1e9
	}
	src.set(next)
	a.CrashAfterTxns(2) // 32 writes: directory/h000, then endpoints h000..h030
	a.Trigger()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, _ := generationOf(t, store.Client, contract.KeyEndpoint("h000"))
		if g == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("crashing leader wrote nothing")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopA()
	if g, _ := generationOf(t, store.Client, contract.KeyGeneration); g != 1 {
		t.Fatalf("generation key moved to %d by a crashed update", g)
	}
	if g, _ := generationOf(t, store.Client, contract.KeyEndpoint("h049")); g != 1 {
		t.Fatalf("h049 at %d: the crash came too late to test anything", g)
	}

	res2 := make(chan publish.Result, 10)
	start(t, store.Client, "b", src, res2)
	r := waitResult(t, res2)
	if r.Generation != 3 {
		t.Fatalf("next leader published generation %d, want 3", r.Generation)
	}
	// What the crashed update wrote is written again, and named, in the
	// next complete generation: the generation key names exactly what its
	// generation wrote, so agents wait for those documents and no other.
	if gd := generationDoc(t, store.Client); len(gd.Changed) != 50 {
		t.Fatalf("generation %d lists %d changed endpoints, want all 50 (31 left by the crash)", gd.Generation, len(gd.Changed))
	}
	if d, _ := generationOf(t, store.Client, contract.KeyEndpoint("h000")); d != 3 {
		t.Fatalf("h000, left at generation 2 by the crash, is at %d, want rewritten at 3", d)
	}
	g, _ := generationOf(t, store.Client, contract.KeyGeneration)
	for i := 0; i < 50; i++ {
		d, _ := generationOf(t, store.Client, contract.KeyEndpoint(fmt.Sprintf("h%03d", i)))
		if d > g {
			t.Fatalf("h%03d at generation %d beyond the generation key %d", i, d, g)
		}
	}
}

// Every field of an endpoint document but its generation counts in the
// comparison that spares re-encoding unchanged documents: a field added
// later and forgotten there would leave stale documents in etcd.
func TestSameSpecComparesEveryField(t *testing.T) {
	base := output(1, false).Endpoints[0].Spec
	if !publish.SameSpec(base, base) {
		t.Fatal("a document differs from itself")
	}
	v := reflect.ValueOf(base)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		changed := base
		changed.Ports = slices.Clone(base.Ports)
		f := reflect.ValueOf(&changed).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Int, reflect.Int64:
			f.SetInt(f.Int() + 1)
		case reflect.Uint64:
			f.SetUint(f.Uint() + 1)
		case reflect.Float64:
			f.SetFloat(f.Float() + 0.25)
		case reflect.Slice:
			changed.Ports[0].Link = "degraded"
		default:
			t.Fatalf("field %s of kind %s: extend this test", name, f.Kind())
		}
		if same := publish.SameSpec(base, changed); same != (name == "Generation") {
			t.Errorf("changing %s: same = %v", name, same)
		}
	}
}
