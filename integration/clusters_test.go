package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/demo"
	"github.com/multiplane/multiplane/internal/fabricdproc"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/kv/kvtest"
	"github.com/multiplane/multiplane/store/pgcluster"
)

// TestRealClusters runs fabricd as in production against a 3-member etcd
// cluster and a PostgreSQL of its own (--etcd-endpoints, --database-url),
// both started by the test: when the etcd member that leads is killed,
// publication resumes within 5 s; when PostgreSQL crashes and restarts,
// fabricd takes changes, publishes them and records their events again
// without being restarted itself.
func TestRealClusters(t *testing.T) {
	ctx := testenv.Context(t)
	etcd := kvtest.NewCluster(t, 3)
	dir := dataDir(t)
	pg, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: filepath.Join(dir, "pg"), NoSync: true, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop(context.Background()) })
	topo, _ := filepath.Abs("../examples/topology.yaml")
	fd, err := fabricdproc.Start(ctx, fabricdproc.Options{Bin: fabricdBin(t), DataDir: dir, LogPath: filepath.Join(dir, "fabricd.log"),
		Args: []string{"--database-url", pg.URL(), "--etcd-endpoints", strings.Join(etcd.Endpoints(), ","),
			"--topology", topo, "--leader-ttl", "2", "--log-level", "warn"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fd.Stop)

	// published waits until the fabric/planes document, read from any
	// member that is up, satisfies ok.
	published := func(what string, timeout time.Duration, ok func(contract.PlanesDoc) bool) {
		t.Helper()
		for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
			var d contract.PlanesDoc
			if resp, err := etcd.Store.Client.Get(ctx, contract.KeyPlanes); err == nil && len(resp.Kvs) == 1 &&
				json.Unmarshal(resp.Kvs[0].Value, &d) == nil && ok(d) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no fabric/planes document with %s within %v", what, timeout)
			}
		}
	}
	draining := func(plane string, timeout time.Duration) {
		t.Helper()
		published(plane+" drained", timeout, func(d contract.PlanesDoc) bool {
			return slices.ContainsFunc(d.Planes, func(p contract.PlaneStatus) bool { return p.Name == plane && p.Drained })
		})
	}

	// The first publication, then the etcd leader member killed: a change
	// made after it is published within 5 s through the other two.
	published("its planes", 30*time.Second, func(d contract.PlanesDoc) bool { return len(d.Planes) > 0 })
	leader := etcd.Leader()
	if leader < 0 {
		t.Fatal("the etcd cluster has no leader")
	}
	etcd.Kill(leader)
	killed := time.Now()
	drainBy(t, ctx, fd, "p1", killed.Add(5*time.Second), "the etcd leader member was killed")
	draining("p1", 5*time.Second-time.Since(killed))
	t.Logf("etcd leader member %d killed: a drain made after it was published %v later", leader, time.Since(killed).Round(time.Millisecond))
	etcd.Restart(leader) // rejoins from its data

	// PostgreSQL crashes and restarts: fabricd takes a change again (its
	// store is PostgreSQL), publishes it and records its plane event.
	syscall.Kill(pg.Pid(), syscall.SIGKILL)
	<-pg.Done()
	if code := tryDrain(ctx, fd, "p2"); code != http.StatusServiceUnavailable {
		t.Errorf("a drain while PostgreSQL was down: %d, want 503", code)
	}
	if err := pg.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	drainBy(t, ctx, fd, "p2", restarted.Add(15*time.Second), "PostgreSQL restarted")
	took := time.Since(restarted)
	draining("p2", 10*time.Second)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var evs struct{ Items []struct{ To string } }
		if err := fd.GetJSON(ctx, "/api/v1/events?subject=p2&limit=100", &evs); err == nil && slices.ContainsFunc(evs.Items, func(e struct{ To string }) bool { return e.To == "draining" }) {
			break
		}
		if time.Now().After(deadline) {
			var all json.RawMessage
			fd.GetJSON(ctx, "/api/v1/events?limit=20&order=desc", &all)
			t.Fatalf("the plane event of the drain made after PostgreSQL restarted was not recorded within 5 s; events: %s", all)
		}
	}
	t.Logf("PostgreSQL killed and restarted: fabricd took a drain %v after the restart, published it and recorded its event", took.Round(time.Millisecond))
}

// drainBy drains plane, trying again until fabricd takes it, by deadline.
func drainBy(t *testing.T, ctx context.Context, fd *fabricdproc.Proc, plane string, deadline time.Time, after string) {
	t.Helper()
	for code := tryDrain(ctx, fd, plane); code != http.StatusCreated; code = tryDrain(ctx, fd, plane) {
		if time.Now().After(deadline) {
			t.Fatalf("a drain of %s refused (%d) until %s after %s", plane, code, deadline.Format(time.TimeOnly), after)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tryDrain posts a drain of plane and returns the HTTP status (0: no answer).
func tryDrain(ctx context.Context, fd *fabricdproc.Proc, plane string) int {
	body, _ := json.Marshal(map[string]string{"subject_kind": "plane", "subject": plane, "reason": "test"})
	resp, err := fd.Do(ctx, http.MethodPost, "/api/v1/drains", bytes.NewReader(body))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestPlaneEventsWhilePostgresIsDown: PostgreSQL holds the topology and
// intents, not the fabric's health; while it is down, a plane failure is
// still published and applied by every agent (from the topology and
// intents last read), and its recovery too.
func TestPlaneEventsWhilePostgresIsDown(t *testing.T) {
	ctx := testenv.Context(t)
	dir := dataDir(t)
	pg, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: filepath.Join(dir, "pg"), NoSync: true, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop(context.Background()) })
	env := startEnv(t, nil, func(c *demo.Config) {
		c.FabricdArgs = append(c.FabricdArgs, "--database-url", pg.URL(), "--health-up-hold", "1s")
	})
	syscall.Kill(pg.Pid(), syscall.SIGKILL)
	<-pg.Done()
	killed := time.Now()
	env.Fabric.SetUp(2, false)
	waitApplied(t, env, "p2", 15*time.Second)
	t.Logf("PostgreSQL down: a plane failure applied by every agent %v after it", time.Since(killed).Round(time.Millisecond))
	env.Fabric.SetUp(2, true)
	testutil.WaitFor(t, 20*time.Second, "every agent using p2 again", func() bool {
		for _, a := range env.Agents {
			c, cancel := context.WithTimeout(ctx, time.Second)
			d, _, _, err := configuration(c, env.Etcd, a.Endpoint())
			cancel()
			if err != nil || !slices.ContainsFunc(d.PathSet.Planes, func(p contract.PlanePath) bool { return p.Plane == "p2" }) ||
				a.Status().AppliedGeneration < d.Generation {
				return false
			}
		}
		return true
	})
	if err := pg.Restart(ctx); err != nil {
		t.Fatal(err)
	}
}
