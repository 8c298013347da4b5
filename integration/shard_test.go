package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/multiplane/multiplane/fabricsim/gnmisim"
	"github.com/multiplane/multiplane/internal/fabricdproc"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/kv/kvtest"
	"github.com/multiplane/multiplane/store/storetest"
)

// apiSwitch is a switch as GET /api/v1/switches shows it.
type apiSwitch struct {
	Name        string `json:"name"`
	CollectedBy string `json:"collected_by"`
	Reachable   bool   `json:"reachable"`
	Synced      bool   `json:"synced"`
}

type replicaProc struct {
	id string
	*fabricdproc.Proc
}

// switches returns the replica's API view of every switch, by name.
func (r replicaProc) switches(ctx context.Context) (map[string]apiSwitch, error) {
	var out struct{ Items []apiSwitch }
	if err := r.GetJSON(ctx, "/api/v1/switches?limit=1000", &out); err != nil {
		return nil, err
	}
	m := map[string]apiSwitch{}
	for _, s := range out.Items {
		m[s.Name] = s
	}
	return m, nil
}

// shardedState reads every replica's API and returns, per switch, the
// replica streaming it synced by its own account (collected_by itself,
// synced and reachable there) and whether every replica names that one.
func shardedState(ctx context.Context, rs []replicaProc) (map[string]string, bool) {
	views := make([]map[string]apiSwitch, len(rs))
	for i, r := range rs {
		v, err := r.switches(ctx)
		if err != nil {
			return nil, false
		}
		views[i] = v
	}
	streamed, agreed := map[string]string{}, true
	for i, r := range rs {
		for name, s := range views[i] {
			if s.CollectedBy == r.id && s.Synced && s.Reachable {
				streamed[name] = r.id
			}
		}
	}
	for _, v := range views {
		for name, s := range v {
			if s.CollectedBy != streamed[name] {
				agreed = false
			}
		}
	}
	return streamed, agreed
}

// Three fabricd processes share 64 switches: every replica's API names the
// same owner for each, the owner of the most is killed (-9) and its
// switches are re-owned, streaming and synced within the lease TTL + 1 s;
// a port going down shows on every replica's API; a rolling restart
// (SIGINT, a new replica in its place) leaves no switch unstreamed.
func TestShardedReplicas(t *testing.T) {
	ctx := testenv.Context(t)
	dbURL := storetest.URL(t)
	etcd := kvtest.New(t)
	bin := fabricdBin(t)
	dir := dataDir(t)
	const ttl, switches = 2, 64
	srcs := make([]*gnmisim.StaticSource, switches)
	fleet, err := gnmisim.StartFleet(gnmisim.FleetConfig{Switches: switches, Ports: 2, Planes: 4, OperPoll: 20 * time.Millisecond,
		Source: func(i int) gnmisim.CounterSource {
			srcs[i] = gnmisim.NewStaticSource([]string{"eth1", "eth2"})
			return srcs[i]
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	topoFile := filepath.Join(dir, "topology.json")
	data, _ := json.Marshal(fleet.Topology())
	if err := os.WriteFile(topoFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	start := func(id string) replicaProc {
		p, err := fabricdproc.Start(ctx, fabricdproc.Options{Bin: bin, DataDir: dir, LogPath: filepath.Join(dir, id+".log"),
			Args: []string{"--database-url", dbURL, "--etcd-endpoints", strings.Join(etcd.Endpoints(), ","),
				"--topology", topoFile, "--replica-id", id, "--leader-ttl", "2", "--telemetry-shard-ttl", fmt.Sprint(ttl),
				"--log-level", "warn"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Stop)
		return replicaProc{id, p}
	}
	var mu sync.Mutex
	rs := []replicaProc{start("a"), start("b"), start("c")}
	live := func() []replicaProc { mu.Lock(); defer mu.Unlock(); return slices.Clone(rs) }
	settled := func() bool {
		streamed, agreed := shardedState(ctx, live())
		per := map[string]int{}
		for _, id := range streamed {
			per[id]++
		}
		return agreed && len(streamed) == switches && len(per) == len(live())
	}
	testutil.WaitFor(t, 60*time.Second, "64 switches streamed by the 3 replicas, named alike by all", settled)

	// A port down at a switch shows on every replica's API.
	link := fleet.Switches[7].Name() + ":eth2"
	srcs[7].Update("eth2", func(p *gnmisim.PortState) { p.OperStatus = "DOWN" })
	changed := time.Now()
	testutil.WaitFor(t, 10*time.Second, link+" down on every replica", func() bool {
		for _, r := range rs {
			var l struct{ State string }
			if err := r.GetJSON(ctx, "/api/v1/links/"+link, &l); err != nil || l.State != "down" {
				return false
			}
		}
		return true
	})
	t.Logf("%s down on all 3 replicas' APIs %v after the port went down", link, time.Since(changed).Round(time.Millisecond))

	// Kill the owner of the most switches.
	streamed, _ := shardedState(ctx, rs)
	per := map[string]int{}
	for _, id := range streamed {
		per[id]++
	}
	victim := rs[0]
	for _, r := range rs {
		if per[r.id] > per[victim.id] {
			victim = r
		}
	}
	killed := time.Now()
	victim.Kill()
	mu.Lock()
	rs = slices.DeleteFunc(rs, func(r replicaProc) bool { return r.id == victim.id })
	mu.Unlock()
	testutil.WaitFor(t, 20*time.Second, "the killed replica's switches re-owned and streamed", settled)
	took := time.Since(killed)
	t.Logf("killed %s (-9), owner of %d of %d switches: all re-owned, streaming and synced %v later (lease TTL %d s)",
		victim.id, per[victim.id], switches, took.Round(time.Millisecond), ttl)
	if limit := ttl*time.Second + time.Second; took > limit+300*time.Millisecond {
		t.Errorf("re-owning took %v, more than the TTL + 1 s (%v)", took, limit)
	}

	// Rolling restart: a new replica joins, then each old one stops in turn
	// and a new one takes its place; some replica streams every switch
	// throughout.
	var gapMu sync.Mutex
	since, worst := map[string]time.Time{}, map[string]time.Duration{}
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			streamed, _ := shardedState(ctx, live())
			now := time.Now()
			gapMu.Lock()
			for _, sw := range fleet.Switches {
				name := sw.Name()
				if streamed[name] != "" {
					if s, ok := since[name]; ok {
						worst[name] = max(worst[name], now.Sub(s))
						delete(since, name)
					}
				} else if _, ok := since[name]; !ok {
					since[name] = now
				}
			}
			gapMu.Unlock()
		}
	}()
	next := 0
	for _, old := range live() {
		mu.Lock()
		rs = append(rs, start(fmt.Sprintf("n%d", next)))
		mu.Unlock()
		next++
		testutil.WaitFor(t, 30*time.Second, "the new replica took its share", settled)
		old.Stop()
		mu.Lock()
		rs = slices.DeleteFunc(rs, func(r replicaProc) bool { return r.id == old.id })
		mu.Unlock()
		testutil.WaitFor(t, 30*time.Second, old.id+"'s switches handed over", settled)
	}
	close(stop)
	<-watched
	var longest time.Duration
	which := ""
	for name, d := range worst {
		if d > longest {
			longest, which = d, name
		}
	}
	for name, s := range since {
		if d := time.Since(s); d > longest {
			longest, which = d, name+" (still)"
		}
	}
	t.Logf("rolling restart of 3 replicas: longest time a switch was not streamed and synced by its named owner %v (%s)",
		longest.Round(time.Millisecond), which)
	if longest > 2*time.Second {
		t.Errorf("a switch had no telemetry for %v in the rolling restart (%s)", longest, which)
	}
	for _, r := range live() {
		var l struct{ State string }
		if err := r.GetJSON(ctx, "/api/v1/links/"+link, &l); err != nil || l.State != "down" {
			t.Errorf("%s: %s is %q after the restarts (%v), want down", r.id, link, l.State, err)
		}
	}
}
