package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/internal/fabricdproc"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/kv/kvtest"
	"github.com/multiplane/multiplane/store/storetest"
)

// TestTwoReplicasLeaderTakeover runs two fabricd replicas on one PostgreSQL
// and one etcd: only the leader writes; when it is killed (-9) the other
// takes over writing within the leader TTL.
func TestTwoReplicasLeaderTakeover(t *testing.T) {
	ctx := testenv.Context(t)
	dbURL := storetest.URL(t)
	etcd := kvtest.New(t)
	bin := fabricdBin(t)
	dir := dataDir(t)
	topo, _ := filepath.Abs("../examples/topology.yaml")
	const ttl = 2
	start := func(id string) *fabricdproc.Proc {
		p, err := fabricdproc.Start(ctx, fabricdproc.Options{Bin: bin, DataDir: dir, LogPath: filepath.Join(dir, id+".log"),
			Args: []string{"--database-url", dbURL, "--etcd-endpoints", strings.Join(etcd.Endpoints(), ","),
				"--topology", topo, "--replica-id", id, "--leader-ttl", "2", "--log-level", "warn"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Stop)
		return p
	}

	// Record who wrote every generation.
	type gen struct {
		at     time.Time
		leader string
		gen    uint64
	}
	gens := make(chan gen, 100)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch := etcd.Client.Watch(wctx, contract.KeyGeneration)
	go func() {
		for resp := range watch {
			for _, ev := range resp.Events {
				var d contract.GenerationDoc
				json.Unmarshal(ev.Kv.Value, &d)
				gens <- gen{time.Now(), d.Leader, d.Generation}
			}
		}
	}()
	next := func(timeout time.Duration) gen {
		select {
		case g := <-gens:
			return g
		case <-time.After(timeout):
			t.Fatalf("no generation published within %v", timeout)
		}
		return gen{}
	}

	a := start("replica-a")
	if g := next(30 * time.Second); g.leader != "replica-a" {
		t.Fatalf("first generation by %q", g.leader)
	}
	b := start("replica-b")

	// Changes made through either replica are published by the leader only.
	for _, p := range []*fabricdproc.Proc{a, b} {
		id := postDrain(t, p, "p1")
		if g := next(10 * time.Second); g.leader != "replica-a" {
			t.Fatalf("generation %d written by %q, not the leader", g.gen, g.leader)
		}
		deleteDrain(t, p, id)
		if g := next(10 * time.Second); g.leader != "replica-a" {
			t.Fatalf("generation %d written by %q, not the leader", g.gen, g.leader)
		}
	}
	select {
	case g := <-gens:
		t.Fatalf("unexpected generation %d by %q", g.gen, g.leader)
	case <-time.After(300 * time.Millisecond):
	}

	// Kill the leader; the follower takes over once the leader's lease expires.
	killed := time.Now()
	a.Kill()
	postDrain(t, b, "p2")
	g := next(ttl*time.Second + 10*time.Second)
	took := g.at.Sub(killed)
	t.Logf("replica-b published generation %d %v after the leader was killed (leader TTL %ds)", g.gen, took.Round(time.Millisecond), ttl)
	if g.leader != "replica-b" {
		t.Fatalf("after the kill generation %d by %q", g.gen, g.leader)
	}
	if took > ttl*time.Second+2*time.Second {
		t.Fatalf("takeover took %v, more than the TTL of %ds (+2s)", took, ttl)
	}
	doc, _, _, err := configuration(ctx, etcd.Client, "host-a")
	if err != nil {
		t.Fatalf("host-a configuration: %v", err)
	}
	for _, p := range doc.PathSet.Planes {
		if p.Plane == "p2" {
			t.Fatalf("new leader's generation still uses drained p2: %+v", doc.PathSet)
		}
	}
}

func postDrain(t *testing.T, p *fabricdproc.Proc, plane string) int64 {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"subject_kind": "plane", "subject": plane, "reason": "test"})
	resp, err := p.Do(context.Background(), http.MethodPost, "/api/v1/drains", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Drain struct{ ID int64 } }
	if resp.StatusCode != http.StatusCreated || json.NewDecoder(resp.Body).Decode(&out) != nil {
		t.Fatalf("drain %s: %s", plane, resp.Status)
	}
	return out.Drain.ID
}

func deleteDrain(t *testing.T, p *fabricdproc.Proc, id int64) {
	t.Helper()
	resp, err := p.Do(context.Background(), http.MethodDelete, "/api/v1/drains/"+jsonNum(id), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("undrain: %s", resp.Status)
	}
}

func jsonNum(n int64) string { b, _ := json.Marshal(n); return string(b) }
