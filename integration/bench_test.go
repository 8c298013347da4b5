package integration

import (
	"context"
	"io"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/multiplane/multiplane/agent"
	"github.com/multiplane/multiplane/bench"
	"github.com/multiplane/multiplane/demo"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/kv"
	"github.com/multiplane/multiplane/store/pgcluster"
	"github.com/multiplane/multiplane/transport"
)

// TestBenchTrafficSurvivesFabricdKill runs the `endpoint bench` code (a
// verified-message benchmark) between two hosts whose agents follow
// fabricd, kills fabricd (-9, its embedded etcd with it) in the middle,
// brings it back, and requires the benchmark to finish verified with the
// traffic flowing throughout.
func TestBenchTrafficSurvivesFabricdKill(t *testing.T) {
	_, err := pgcluster.FindBinDir()
	testenv.Require(t, err == nil, "needs PostgreSQL server binaries (Debian package postgresql)")
	ctx := testenv.Context(t)
	cfg := demo.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.FabricdBin = dataDir(t), "", fabricdBin(t)
	cfg.Hosts, cfg.Planes, cfg.RateBps, cfg.FailPlane, cfg.Out = 2, 4, 20e6, -1, io.Discard
	cfg.FabricPort = testutil.FabricPort(t, cfg.Hosts, cfg.Planes)
	cfg.NoHosts = true
	cfg.FabricdArgs = []string{"--log-level", "warn"}
	env, err := demo.Start(ctx, cfg, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	etcd, err := kv.EmbeddedEndpoints(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}

	var agents sync.WaitGroup
	var mu sync.Mutex
	var running []*agent.Agent
	agentCtx, stopAgents := context.WithCancel(ctx)
	defer func() { stopAgents(); agents.Wait() }()
	withAgent := func(name string) func(*transport.Transport) {
		return func(tr *transport.Transport) {
			a, err := agent.New(agent.Config{Endpoint: name, EtcdEndpoints: etcd, EtcdDialTimeout: time.Second}, agent.NewTransportApplier(tr), nil)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			running = append(running, a)
			mu.Unlock()
			agents.Go(func() { a.Run(agentCtx) })
		}
	}
	addrs := func(host int, peer bool) []netip.Addr {
		var out []netip.Addr
		for p := 0; p < cfg.Planes; p++ {
			if peer {
				out = append(out, env.Fabric.PeerAddr(host, p).Addr())
			} else {
				out = append(out, env.Fabric.LocalAddr(host, p))
			}
		}
		return out
	}
	base := bench.Config{Mode: bench.ModeMultipath, Port: env.Fabric.Port(), Size: 64 << 10, Conns: 1, MTU: 1500, Iterations: 5000,
		ConnectTimeout: 10 * time.Second, Timeout: time.Minute}
	srvCfg := base
	srvCfg.Role, srvCfg.Bind, srvCfg.OnTransport = bench.RoleServer, addrs(1, false), withAgent("host-b")
	srvCfg.Clients = 1 // the server ends after the one client's run
	cliCfg := base
	cliCfg.Role, cliCfg.Bind, cliCfg.Peer, cliCfg.OnTransport = bench.RoleClient, addrs(0, false), addrs(1, true), withAgent("host-a")
	cliCfg.Duration = 14 * time.Second

	type outcome struct {
		r   bench.Result
		err error
	}
	srvDone, cliDone := make(chan outcome, 1), make(chan outcome, 1)
	go func() { r, err := bench.Run(ctx, srvCfg, io.Discard, io.Discard); srvDone <- outcome{r, err} }()
	go func() { r, err := bench.Run(ctx, cliCfg, io.Discard, io.Discard); cliDone <- outcome{r, err} }()

	time.Sleep(3 * time.Second) // let the benchmark run before the crash
	env.KillFabricd()
	t.Log("fabricd killed")
	time.Sleep(6 * time.Second) // the outage
	if err := env.StartFabricd(ctx); err != nil {
		t.Fatal(err)
	}
	t.Log("fabricd back")
	cli := <-cliDone
	srv := <-srvDone
	if cli.err != nil || srv.err != nil {
		t.Fatalf("benchmark failed: client %v, server %v", cli.err, srv.err)
	}
	line := float64(cfg.Planes) * float64(cfg.RateBps)
	t.Logf("verified goodput %.1f Mbit/s over %.1f s (%d messages) with fabricd killed for 6 s; line %.0f Mbit/s",
		cli.r.GoodputBps/1e6, cli.r.Seconds, cli.r.Messages, line/1e6)
	if cli.r.GoodputBps < 0.3*line {
		t.Fatalf("goodput %.1f Mbit/s: traffic did not keep flowing", cli.r.GoodputBps/1e6)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(running) != 2 {
		t.Fatalf("%d agents ran on the benchmark's transports, want 2", len(running))
	}
	for _, a := range running {
		if st := a.Status(); st.AppliedGeneration == 0 || st.Source != agent.SourceEtcd {
			t.Fatalf("agent %s never applied a document from etcd: %+v", a.Endpoint(), st)
		}
	}
}
