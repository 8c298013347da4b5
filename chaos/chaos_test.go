package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/multiplane/multiplane/agent"
	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/demo"
	"github.com/multiplane/multiplane/internal/fabricdproc"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/kv/kvtest"
	"github.com/multiplane/multiplane/store/pgcluster"
)

var (
	duration = flag.Duration("chaos.duration", 90*time.Second, "how long faults are injected (make chaos: 10m)")
	seed     = flag.Uint64("chaos.seed", 0, "random seed (0: from the clock; the report gives it)")
	reportTo = flag.String("chaos.report", "", "write the markdown report to this file")
)

// Sizes of the system under test.
const (
	hosts   = 4 // two sender/receiver pairs
	planes  = 4
	rateBps = 10e6 // per plane port
	ttl     = 2    // leader and shard leases, seconds
)

// replica is one fabricd process; the first is the demo environment's.
type replica struct {
	name string
	proc *fabricdproc.Proc // nil while down
}

// suite is one chaos run.
type suite struct {
	t        *testing.T
	ctx      context.Context
	rng      *rand.Rand
	seed     uint64
	start    time.Time
	env      *demo.Env
	etcd     *kvtest.Cluster
	pg       *pgcluster.Cluster
	replicas []*replica
	applied  *appliedLog

	mu         sync.Mutex
	faults     []faultRecord
	violations []string
	checked    map[string]int // observations checked, by invariant
	notes      map[string]string
	planeMoved time.Time // last plane failure or repair
}

type faultRecord struct {
	At, For      time.Duration
	Kind, Target string
}

// violate records a broken invariant (the test fails at the end, with all
// of them in the report).
func (s *suite) violate(invariant, format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.violations) < 200 {
		s.violations = append(s.violations, invariant+": "+fmt.Sprintf(format, args...))
	}
}

func (s *suite) count(invariant string, n int) {
	s.mu.Lock()
	s.checked[invariant] += n
	s.mu.Unlock()
}

func (s *suite) note(key, format string, args ...any) {
	s.mu.Lock()
	s.notes[key] = fmt.Sprintf(format, args...)
	s.mu.Unlock()
}

// TestChaos runs the suite for -chaos.duration.
func TestChaos(t *testing.T) {
	_, err := pgcluster.FindBinDir()
	testenv.Require(t, err == nil, "needs PostgreSQL server binaries (Debian package postgresql)")
	s := &suite{t: t, ctx: testenv.Context(t), seed: *seed, checked: map[string]int{}, notes: map[string]string{}}
	if s.seed == 0 {
		s.seed = uint64(time.Now().UnixNano())
	}
	s.rng = rand.New(rand.NewPCG(s.seed, s.seed>>32|1))
	t.Logf("chaos: seed %d, %v of faults", s.seed, *duration)
	s.startSystem()

	watchCtx, stopWatch := context.WithCancel(s.ctx)
	var watchers sync.WaitGroup
	watchers.Go(func() { s.watchTraffic(watchCtx) })
	watchers.Go(func() { s.watchAgents(watchCtx) })
	watchers.Go(func() { s.failPlanes(watchCtx) })

	s.start = time.Now()
	for time.Since(s.start) < *duration {
		s.injectOne()
	}
	stopWatch()
	watchers.Wait()
	s.repairAll()

	s.checkConvergence()
	s.checkGenerations()
	s.checkHistory()
	if err := s.writeReport(); err != nil {
		t.Errorf("report: %v", err)
	}
	for _, v := range s.violations {
		t.Error(v)
	}
}

// startSystem starts etcd (3 members), PostgreSQL, the userspace fabric
// with switches, agents and traffic, and three fabricd replicas.
func (s *suite) startSystem() {
	t := s.t
	dir, err := os.MkdirTemp("", "mp-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755) // the postgres user must reach its data when root
	t.Cleanup(func() { os.RemoveAll(dir) })
	s.etcd = kvtest.NewCluster(t, 3)
	if s.pg, err = pgcluster.Start(s.ctx, pgcluster.Options{DataDir: filepath.Join(dir, "pg"), NoSync: true, Logger: quietLogger(t)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.pg.Stop(context.Background()) })
	s.applied = &appliedLog{}
	cfg := demo.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.FabricdBin = dir, "", testutil.FabricdBin(t)
	cfg.Hosts, cfg.Planes, cfg.RateBps, cfg.Message = hosts, planes, rateBps, 64<<10
	cfg.FabricPort = testutil.FabricPort(t, hosts, planes)
	cfg.FailPlane, cfg.Out = -1, io.Discard
	cfg.EtcdEndpoints = s.etcd.Endpoints()
	cfg.FabricdArgs = []string{"--database-url", s.pg.URL(), "--leader-ttl", fmt.Sprint(ttl),
		"--telemetry-shard-ttl", fmt.Sprint(ttl), "--health-up-hold", "1s", "--log-level", "warn"}
	cfg.WrapApplier = s.applied.wrap
	if s.env, err = demo.Start(s.ctx, cfg, quietLogger(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.env.Close)
	s.replicas = []*replica{{name: "r0", proc: s.env.Fabricd}}
	for _, name := range []string{"r1", "r2"} {
		r := &replica{name: name}
		s.startReplica(r)
		s.replicas = append(s.replicas, r)
	}
	t.Cleanup(func() {
		for _, r := range s.replicas[1:] {
			if r.proc != nil {
				r.proc.Stop()
			}
		}
	})
	testutil.WaitFor(t, 60*time.Second, "agents applying the first generation", func() bool {
		for _, a := range s.env.Agents {
			if a.Status().AppliedGeneration == 0 {
				return false
			}
		}
		return true
	})
}

func (s *suite) startReplica(r *replica) {
	if r.name == "r0" {
		if err := s.env.StartFabricd(s.ctx); err != nil {
			s.t.Fatal(err)
		}
		r.proc = s.env.Fabricd
		return
	}
	p, err := s.env.StartReplica(s.ctx, r.name)
	if err != nil {
		s.t.Fatal(err)
	}
	r.proc = p
}

// injectOne injects one fault of the control plane or the switches,
// holds it, repairs it and lets the system settle a moment.
func (s *suite) injectOne() {
	hold := time.Duration(1000+s.rng.IntN(3000)) * time.Millisecond
	at := time.Since(s.start)
	rec := func(kind, target string) {
		s.mu.Lock()
		s.faults = append(s.faults, faultRecord{At: at, For: hold, Kind: kind, Target: target})
		s.mu.Unlock()
	}
	switch k := s.rng.IntN(6); k {
	case 0, 1:
		r := s.replicas[s.rng.IntN(len(s.replicas))]
		if k == 0 {
			rec("fabricd killed (-9)", r.name)
			r.proc.Kill()
		} else {
			rec("fabricd stopped (SIGINT)", r.name)
			r.proc.Stop()
		}
		r.proc = nil
		sleep(s.ctx, hold)
		s.startReplica(r)
	case 2:
		i := s.rng.IntN(3)
		rec("etcd member killed (-9)", fmt.Sprintf("member %d", i))
		s.etcd.Kill(i)
		sleep(s.ctx, hold)
		s.etcd.Restart(i)
	case 3:
		rec("PostgreSQL killed (-9)", "postgres")
		syscall.Kill(s.pg.Pid(), syscall.SIGKILL)
		<-s.pg.Done()
		sleep(s.ctx, hold)
		if err := s.pg.Restart(s.ctx); err != nil {
			s.t.Fatal(err)
		}
	case 4:
		sw := s.env.Switches[s.rng.IntN(len(s.env.Switches))]
		rec("switch stream stopped", sw.Name())
		sw.Stop()
		sleep(s.ctx, hold)
		if err := sw.Resume(); err != nil {
			s.t.Fatal(err)
		}
	case 5:
		sw := s.env.Switches[s.rng.IntN(len(s.env.Switches))]
		hold += 3 * time.Second // past the collector's silence timeout
		rec("switch stream stalled", sw.Name())
		sw.Stall()
		sleep(s.ctx, hold)
		sw.Unstall()
	}
	sleep(s.ctx, time.Duration(500+s.rng.IntN(1500))*time.Millisecond)
}

// failPlanes takes one plane down at a time, now and then.
func (s *suite) failPlanes(ctx context.Context) {
	rng := rand.New(rand.NewPCG(s.seed+1, 7))
	for ctx.Err() == nil {
		sleep(ctx, time.Duration(4000+rng.IntN(6000))*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
		p := rng.IntN(planes)
		hold := time.Duration(3000+rng.IntN(5000)) * time.Millisecond
		s.mu.Lock()
		s.faults = append(s.faults, faultRecord{At: time.Since(s.start), For: hold, Kind: "plane down", Target: fmt.Sprintf("p%d", p)})
		s.planeMoved = time.Now()
		s.mu.Unlock()
		s.env.Fabric.SetUp(p, false)
		sleep(context.WithoutCancel(ctx), hold)
		s.env.Fabric.SetUp(p, true)
		s.mu.Lock()
		s.planeMoved = time.Now()
		s.mu.Unlock()
	}
}

// repairAll brings every process back after the last fault.
func (s *suite) repairAll() {
	for p := range planes {
		s.env.Fabric.SetUp(p, true)
	}
	for _, r := range s.replicas {
		if r.proc == nil {
			s.startReplica(r)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// quietLogger logs warnings and errors to the test.
func quietLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// appliedLog records every configuration the agents apply.
type appliedLog struct {
	mu   sync.Mutex
	docs []appliedDoc
}

type appliedDoc struct {
	endpoint string
	doc      contract.EndpointDoc
}

func (l *appliedLog) wrap(endpoint string, inner agent.Applier) agent.Applier {
	return &recordingApplier{Applier: inner, endpoint: endpoint, log: l}
}

type recordingApplier struct {
	agent.Applier
	endpoint string
	log      *appliedLog
}

func (r *recordingApplier) Apply(doc contract.EndpointDoc) error {
	err := r.Applier.Apply(doc)
	if err == nil || errors.Is(err, agent.ErrNotEnforced) {
		r.log.mu.Lock()
		r.log.docs = append(r.log.docs, appliedDoc{r.endpoint, doc})
		r.log.mu.Unlock()
	}
	return err
}

// Planes passes the transport's plane count through (the agent asks).
func (r *recordingApplier) Planes() int {
	if pc, ok := r.Applier.(interface{ Planes() int }); ok {
		return pc.Planes()
	}
	return 0
}
