package integration

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/multiplane/multiplane/demo"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/kv"
	"github.com/multiplane/multiplane/store/pgcluster"
)

func startEnv(t *testing.T, etcd []string, mutate ...func(*demo.Config)) *demo.Env {
	t.Helper()
	_, err := pgcluster.FindBinDir()
	testenv.Require(t, err == nil, "needs PostgreSQL server binaries (Debian package postgresql)")
	cfg := demo.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.FabricdBin = dataDir(t), "", fabricdBin(t)
	cfg.Hosts, cfg.Planes, cfg.RateBps, cfg.Message = 2, 4, 20e6, 64<<10
	cfg.FabricPort = testutil.FabricPort(t, cfg.Hosts, cfg.Planes) // not 4793: a demo may run here
	cfg.FailPlane, cfg.Out = -1, io.Discard
	cfg.EtcdEndpoints = etcd
	cfg.FabricdArgs = []string{"--log-level", "warn"}
	for _, m := range mutate {
		m(&cfg)
	}
	env, err := demo.Start(testenv.Context(t), cfg, testenv.Logger(t).With("env", "integration"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	waitConverged(t, env, 30*time.Second)
	return env
}

// rates samples every plane's forwarded bytes over a window, in bit/s.
func rates(env *demo.Env, window time.Duration) []float64 {
	n := len(env.Switches)
	before := make([]uint64, n)
	for p := range before {
		before[p] = env.PlaneBytes(p)
	}
	time.Sleep(window) // a measurement window, not a wait for a condition
	out := make([]float64, n)
	for p := range out {
		out[p] = float64(env.PlaneBytes(p)-before[p]) * 8 / window.Seconds()
	}
	return out
}

// goodput is host 1's receive rate over a window, in bit/s.
func goodput(env *demo.Env, window time.Duration) float64 {
	before := env.Received(1)
	time.Sleep(window) // a measurement window
	return float64(env.Received(1)-before) * 8 / window.Seconds()
}

// converged reports whether every agent applied its current document, and
// the generation key announces it.
func converged(t *testing.T, env *demo.Env) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, a := range env.Agents {
		d, own, g, err := configuration(ctx, env.Etcd, a.Endpoint())
		if err != nil || own > g.Generation || a.Status().AppliedGeneration < d.Generation {
			return false
		}
	}
	return true
}

func waitConverged(t *testing.T, env *demo.Env, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !converged(t, env) {
		if time.Now().After(deadline) {
			t.Fatalf("agents did not converge within %v", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDrainMovesTraffic drains a plane under load: its traffic falls to
// about zero within a second, and comes back after the undrain.
func TestDrainMovesTraffic(t *testing.T) {
	env := startEnv(t, nil)
	deadline := time.Now().Add(20 * time.Second)
	var before []float64
	for {
		before = rates(env, 500*time.Millisecond)
		if before[1] > 1e6 || time.Now().After(deadline) {
			break
		}
	}
	if before[1] < 1e6 {
		t.Fatalf("no traffic on p1 before the drain: %v bit/s", before)
	}
	t0 := time.Now()
	id := postDrain(t, env.Fabricd, "p1")
	var moved time.Duration
	for time.Since(t0) < 5*time.Second {
		r := rates(env, 100*time.Millisecond)
		if r[1] < 0.05*before[1] {
			moved = time.Since(t0)
			break
		}
	}
	t.Logf("p1 before the drain %.1f Mbit/s; traffic off p1 %v after the drain request", before[1]/1e6, moved.Round(10*time.Millisecond))
	if moved == 0 || moved > time.Second {
		t.Fatalf("traffic still on p1 %v after the drain", time.Since(t0))
	}
	if r := rates(env, 500*time.Millisecond); r[0]+r[2]+r[3] < 1e6 {
		t.Fatalf("traffic stopped instead of moving: %v", r)
	}
	deleteDrain(t, env.Fabricd, id)
	deadline = time.Now().Add(5 * time.Second)
	for {
		r := rates(env, 200*time.Millisecond)
		if r[1] > 0.3*before[1] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("traffic did not come back to p1 after the undrain: %v", r)
		}
	}
}

// TestTrafficSurvivesControlPlaneOutage kills fabricd (-9), then stops etcd
// for 30 s: traffic keeps flowing on the last configuration, and when they
// return the agents converge on what changed meanwhile.
func TestTrafficSurvivesControlPlaneOutage(t *testing.T) {
	etcdDir := filepath.Join(dataDir(t), "etcd")
	ctx := testenv.Context(t)
	etcd, err := kv.StartEmbedded(ctx, etcdDir, kv.EmbeddedOptions{}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	env := startEnv(t, etcd.Endpoints())
	base := goodput(env, time.Second)
	if base < 1e6 {
		t.Fatalf("no traffic before the outage: %.0f bit/s", base)
	}

	// fabricd killed: traffic flows on.
	env.KillFabricd()
	for i := 0; i < 5; i++ {
		if g := goodput(env, time.Second); g < flowing*base {
			t.Fatalf("goodput fell to %.1f Mbit/s (from %.1f) with fabricd dead", g/1e6, base/1e6)
		}
	}
	if err := env.StartFabricd(ctx); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	postDrain(t, env.Fabricd, "p3")
	waitApplied(t, env, "p3", 15*time.Second)
	t.Logf("after fabricd's restart, a drain converged in %v", time.Since(t0).Round(time.Millisecond))
	waitPlaneIdle(t, env, 3, 2*time.Second)

	// etcd stopped for 30 s: traffic flows on.
	base = goodput(env, time.Second)
	etcd.Close()
	low := base
	for i := 0; i < 30; i++ {
		g := goodput(env, time.Second)
		low = min(low, g)
		if g < flowing*base {
			t.Fatalf("goodput fell to %.1f Mbit/s (from %.1f) %ds into the etcd outage", g/1e6, base/1e6, i)
		}
	}
	t.Logf("goodput before %.1f Mbit/s, lowest second during the 30 s etcd outage %.1f Mbit/s", base/1e6, low/1e6)
	if etcd, err = kv.StartEmbedded(ctx, etcdDir, kv.EmbeddedOptions{}, testenv.Logger(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	t0 = time.Now()
	postDrain(t, env.Fabricd, "p2")
	waitApplied(t, env, "p2", 30*time.Second)
	t.Logf("after etcd's return, a drain converged in %v", time.Since(t0).Round(time.Millisecond))
	waitPlaneIdle(t, env, 2, 2*time.Second)
}

// flowing is the share of its goodput traffic must keep, every second,
// while the control plane is away (the machine's two cores are shared with
// fabricd, the fabric and the other tests, so seconds vary).
const flowing = 0.25

// waitApplied waits until every agent applied a document without plane,
// announced by the generation key.
func waitApplied(t *testing.T, env *demo.Env, plane string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done := converged(t, env)
		for _, a := range env.Agents {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			d, _, _, err := configuration(ctx, env.Etcd, a.Endpoint())
			cancel()
			if err != nil {
				done = false
				break
			}
			for _, p := range d.PathSet.Planes {
				if p.Plane == plane {
					done = false
				}
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("agents did not apply a path set without %s within %v", plane, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitPlaneIdle waits until a plane carries under 5% of the others' mean.
func waitPlaneIdle(t *testing.T, env *demo.Env, plane int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r := rates(env, 200*time.Millisecond)
		var others float64
		for p, v := range r {
			if p != plane {
				others += v
			}
		}
		if r[plane] < 0.05*others/float64(len(r)-1) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("p%d still carries traffic: %v bit/s", plane, r)
		}
	}
}
