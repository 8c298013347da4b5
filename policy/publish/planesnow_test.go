package publish_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/kv/kvtest"
	"github.com/multiplane/multiplane/policy/publish"
)

// A plane going down publishes the planes' statuses at once, before any
// computation, as one transaction of the planes and generation keys;
// the full computation follows once the burst is over and publishes only
// what else changed.
func TestPlaneDownPublishesPlanesBeforeComputing(t *testing.T) {
	cli := kvtest.New(t).Client
	cfg := publish.DefaultConfig()
	cfg.ID, cfg.MaxTxnOps, cfg.ParallelTxns, cfg.SessionTTL = "a", 16, 2, 2
	cfg.HoldQuiet, cfg.HoldMax = 200*time.Millisecond, time.Second
	src := &source{}
	src.set(output(3, false))
	c := &computations{src: src}
	p := publish.New(cli, cfg, testenv.Logger(t))
	planesNow := src.planes
	p.SetPlanesNow(func() ([]contract.PlaneStatus, bool) { return planesNow(), true })
	results := run(t, p, c.compute)
	first := waitResult(t, results)
	_, docRev := generationOf(t, cli, contract.KeyEndpoint("h001"))

	// p1 goes down: no endpoint's document changes.
	down := output(3, false)
	down.Planes[1].State, down.Planes[1].CapacityRatio = "down", 0
	src.set(down)
	urgent := time.Now()
	p.TriggerHealth() // the links' transitions come first
	p.TriggerNow()
	r := waitResult(t, results)
	if n := len(c.since(urgent)); n != 0 {
		t.Fatalf("%d computations before the planes went out, want 0", n)
	}
	if r.Generation != first.Generation+1 || r.Written != 2 || r.Txns != 1 {
		t.Fatalf("planes published as %+v, want generation %d: 2 keys in 1 transaction", r, first.Generation+1)
	}
	var pd contract.PlanesDoc
	getJSON(t, cli, contract.KeyPlanes, &pd)
	var gd contract.GenerationDoc
	getJSON(t, cli, contract.KeyGeneration, &gd)
	if pd.Generation != r.Generation || pd.Planes[1].State != "down" || gd.Generation != r.Generation ||
		gd.PlanesGeneration != r.Generation || gd.Planes[1].State != "down" || len(gd.Changed) != 0 || gd.ChangedAll {
		t.Fatalf("after the plane went down: planes key %+v, generation key %+v", pd, gd)
	}
	if _, rev := generationOf(t, cli, contract.KeyEndpoint("h001")); rev != docRev {
		t.Fatalf("h001's document rewritten (revision %d → %d)", docRev, rev)
	}

	// The computation follows after HoldQuiet and finds nothing else.
	time.Sleep(cfg.HoldQuiet + 300*time.Millisecond)
	if n := len(c.since(urgent)); n != 1 {
		t.Fatalf("%d computations after the planes went out, want 1", n)
	}
	select {
	case r := <-results:
		t.Fatalf("the computation published again (%+v) with nothing else changed", r)
	default:
	}

	// TriggerNow again with the planes as etcd has them (the failure
	// seen again mid-burst): the computation waits for the burst's end.
	again := time.Now()
	p.TriggerHealth()
	p.TriggerNow()
	time.Sleep(cfg.HoldQuiet / 2)
	if n := len(c.since(again)); n != 0 {
		t.Fatalf("%d computations within %v of a TriggerNow with nothing new, want 0 before HoldQuiet (%v)", n, cfg.HoldQuiet/2, cfg.HoldQuiet)
	}
	time.Sleep(cfg.HoldQuiet + 300*time.Millisecond)
	if n := len(c.since(again)); n != 1 {
		t.Fatalf("%d computations after a TriggerNow with nothing new, want 1 once the burst ended", n)
	}

	// p0 goes down too, and one endpoint's link on p1 came back as
	// degraded in the computation: the planes go out first, the
	// endpoint's document with the computation.
	both := output(3, true)
	both.Planes[0].State, both.Planes[0].CapacityRatio = "down", 0
	both.Planes[1].State, both.Planes[1].CapacityRatio = "down", 0
	src.set(both)
	p.TriggerNow()
	r = waitResult(t, results)
	if r.Written != 2 {
		t.Fatalf("planes published as %+v, want 2 keys", r)
	}
	r2 := waitResult(t, results)
	getJSON(t, cli, contract.KeyGeneration, &gd)
	if r2.Generation != r.Generation+1 || gd.Generation != r2.Generation || len(gd.Changed) != 1 || gd.Changed[0] != "h000" {
		t.Fatalf("the computation after the planes: %+v, generation key %+v; want h000's document in generation %d", r2, gd, r.Generation+1)
	}
}

func (s *source) planes() []contract.PlaneStatus { return s.out.Load().Planes }

func getJSON(t *testing.T, cli interface {
	Get(context.Context, string, ...clientv3.OpOption) (*clientv3.GetResponse, error)
}, key string, v any) {
	t.Helper()
	resp, err := cli.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("get %s: %v", key, err)
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, v); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
}
