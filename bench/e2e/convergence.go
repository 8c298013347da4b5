package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/multiplane/multiplane/agent"
	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/fabricsim/gnmisim"
	"github.com/multiplane/multiplane/internal/fabricdproc"
	"github.com/multiplane/multiplane/kv"
	"github.com/multiplane/multiplane/planes"
)

// ConvergenceConfig sizes the convergence benchmark.
type ConvergenceConfig struct {
	FabricdBin  string
	WorkDir     string
	Endpoints   int // agents
	Planes      int
	PerPlane    int // switches per plane
	Clients     int // etcd clients the agents share
	Sample      time.Duration
	DrainCycles int           // drain/undrain cycles, one a second
	Timeout     time.Duration // per convergence
	// Settle is the quiet time between the agents' first convergence and
	// the first event: the statuses of their first apply are taken in,
	// and fabricd's idle CPU is measured.
	Settle time.Duration
	// FabricdArgs are more fabricd flags, after the benchmark's own (a
	// variant under test, or --log-level info to see its publications).
	FabricdArgs []string
	// HeapProfile, when set, is where the benchmark process's heap profile
	// is written once the agents converged on their first generation.
	HeapProfile string
}

// DefaultConvergenceConfig is the setup: 4,000 agents.
func DefaultConvergenceConfig() ConvergenceConfig {
	return ConvergenceConfig{FabricdBin: "bin/fabricd", Endpoints: 4000, Planes: 8, PerPlane: 4, Clients: 8,
		Sample: 10 * time.Second, DrainCycles: 60, Timeout: 30 * time.Second, Settle: 10 * time.Second}
}

// Convergence is one measured event.
type Convergence struct {
	Latency     Quantiles     // trigger → each agent applied a document reflecting it
	Detect      time.Duration // trigger → fabricd's health engine changed the plane's state (its event's timestamp)
	Published   time.Duration // trigger → the generation agents end on is announced in etcd
	Delivery    Quantiles     // that announcement → each agent applied
	Writes      float64       // etcd documents written (generation keys included)
	Bytes       float64
	Generations float64
	CPU         float64 // fabricd CPU seconds over the event
	ComputeSec  float64 // fabricd time computing policy, summed over the generations
	WriteSec    float64 // fabricd time writing to etcd, summed
	Missing     int     // agents that did not converge in time
}

// ConvergenceResult are the measured figures.
type ConvergenceResult struct {
	Config           ConvergenceConfig
	Initial          time.Duration // all agents applied their first generation after start
	PlaneDown        Convergence
	Injection        time.Duration // setting every port of the plane DOWN at its switches
	PlaneUp          Convergence
	Drains           []Convergence
	AgentHeapBytes   float64 // per agent
	AgentGoroutines  float64 // per agent
	FabricdCPUPerSec float64 // during the drain cycles
	FabricdIdleCPU   float64 // cores, over the settle time
	// DrainWrites and DrainBytes are fabricd's etcd writes and bytes over
	// all drain operations, from fresh /metrics answers before and after
	// (one per operation would read answers cached for a second).
	DrainWrites, DrainBytes float64
}

// recorder is the benchmark's Applier: it records when each agent applied
// a document, and which planes it held.
type recorder struct {
	mu      sync.Mutex
	applied map[string]appliedDoc
}

type appliedDoc struct {
	at     time.Time
	gen    uint64
	planes []string
}

type recordingApplier struct {
	r    *recorder
	name string
	n    int
}

func (a recordingApplier) Apply(doc contract.EndpointDoc) error {
	var ps []string
	for _, p := range doc.PathSet.Planes {
		ps = append(ps, p.Plane)
	}
	a.r.mu.Lock()
	// A later generation that leaves the path set's planes as they were
	// (a down plane's capacity falling further) does not move the time
	// the agent first reflected the event.
	if prev, ok := a.r.applied[a.name]; !ok || !slices.Equal(prev.planes, ps) {
		a.r.applied[a.name] = appliedDoc{at: time.Now(), gen: doc.Generation, planes: ps}
	}
	a.r.mu.Unlock()
	return nil
}
func (a recordingApplier) Stats() []contract.PathStatus { return nil }
func (a recordingApplier) Planes() int                  { return a.n }

// wait until every agent applied a document satisfying ok; returns per-agent
// apply times and how many did not make it.
func (r *recorder) wait(ctx context.Context, names []string, timeout time.Duration, ok func(appliedDoc) bool) ([]time.Time, int) {
	deadline := time.Now().Add(timeout)
	for {
		r.mu.Lock()
		var times []time.Time
		for _, n := range names {
			if d, found := r.applied[n]; found && ok(d) {
				times = append(times, d.at)
			}
		}
		r.mu.Unlock()
		if len(times) == len(names) || time.Now().After(deadline) || ctx.Err() != nil {
			return times, len(names) - len(times)
		}
		// Apply records each agent's time; scanning 4,000 agents on every
		// apply would take a core from the agents being measured.
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// RunConvergence starts the switches, fabricd and the agents, then fails a
// plane through telemetry, restores it, and cycles drains.
func RunConvergence(ctx context.Context, cfg ConvergenceConfig, logger *slog.Logger) (*ConvergenceResult, error) {
	res := &ConvergenceResult{Config: cfg}
	switches := cfg.Planes * cfg.PerPlane
	ports := cfg.Endpoints / cfg.PerPlane
	sys, err := startSystem(ctx, gnmisim.FleetConfig{Switches: switches, Ports: ports, Planes: cfg.Planes,
		Tick: cfg.Sample, Stagger: true, Logger: logger.With("component", "gnmisim")}, cfg.FabricdBin, cfg.WorkDir, "fabricd-convergence",
		append([]string{"--health-up-hold", "1s"}, cfg.FabricdArgs...)...)
	if err != nil {
		return nil, err
	}
	defer sys.close()
	fleet, topo, fd := sys.fleet, sys.topo, sys.fd
	dataDir := filepath.Join(cfg.WorkDir, "fabricd-convergence")
	if err := waitSynced(ctx, fd, switches, 3*time.Minute); err != nil {
		return nil, err
	}
	endpoints, err := kv.EmbeddedEndpoints(dataDir)
	if err != nil {
		return nil, err
	}

	// Agents: real agent code, shared etcd clients and one shared lease.
	var clients []*clientv3.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	// One more client than the agents share, for the benchmark's own
	// watch of the generation key: behind 1,000 agents' watches on one
	// stream, it would see a generation late.
	for range max(cfg.Clients, 1) + 1 {
		c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
			MaxCallSendMsgSize: 16 << 20, MaxCallRecvMsgSize: 64 << 20})
		if err != nil {
			return nil, err
		}
		clients = append(clients, c)
	}
	lease, err := clients[0].Grant(ctx, 30)
	if err != nil {
		return nil, err
	}
	keep, err := clients[0].KeepAlive(ctx, lease.ID)
	if err != nil {
		return nil, err
	}
	go func() {
		for range keep {
		}
	}()
	rec := &recorder{applied: map[string]appliedDoc{}}
	var names []string
	for _, e := range topo.Endpoints {
		names = append(names, e.Name)
	}
	runtime.GC()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	g0 := runtime.NumGoroutine()
	agentCtx, stopAgents := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopAgents(); wg.Wait() }()
	start := time.Now()
	for i, name := range names {
		a, err := agent.New(agent.Config{Endpoint: name, Client: clients[i%(len(clients)-1)], Lease: lease.ID,
			StatusInterval: time.Minute}, recordingApplier{r: rec, name: name, n: cfg.Planes}, nil)
		if err != nil {
			return nil, err
		}
		wg.Go(func() { a.Run(agentCtx) })
	}
	if _, missing := rec.wait(ctx, names, 2*cfg.Timeout, func(appliedDoc) bool { return true }); missing > 0 {
		return nil, fmt.Errorf("e2e: %d agents never applied a first document", missing)
	}
	res.Initial = time.Since(start)
	runtime.GC()
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	res.AgentHeapBytes = float64(int64(ms1.HeapInuse)-int64(ms0.HeapInuse)) / float64(len(names))
	res.AgentGoroutines = float64(runtime.NumGoroutine()-g0) / float64(len(names))
	if cfg.HeapProfile != "" {
		if err := writeHeapProfile(cfg.HeapProfile); err != nil {
			return nil, err
		}
	}
	logger.Info("agents converged on the first generation", "agents", len(names), "took", res.Initial)

	if cfg.Settle > 0 {
		cpu0, _ := cpuSeconds(fd.Pid())
		settled := time.Now()
		sleep(ctx, cfg.Settle)
		cpu1, _ := cpuSeconds(fd.Pid())
		res.FabricdIdleCPU = (cpu1 - cpu0) / time.Since(settled).Seconds()
	}
	genTimes := watchGenerations(ctx, clients[len(clients)-1])
	// measure waits for the agents after trigger. before, when given, are
	// fabricd's counters read before the trigger (plane events); without,
	// they are read at once (drain cycles, one operation a second).
	measure := func(trigger time.Time, before *policyCounters, detectPlane, detectTo string, ok func(appliedDoc) bool) Convergence {
		var c Convergence
		if before == nil {
			before = readPolicyCounters(ctx, fd, false)
		}
		times, missing := rec.wait(ctx, names, cfg.Timeout, ok)
		cpu1, _ := cpuSeconds(fd.Pid())
		c.Missing = missing
		var lat []time.Duration
		for _, t := range times {
			lat = append(lat, t.Sub(trigger))
		}
		c.Latency = quantiles(lat)
		if detectPlane != "" {
			// From the history once the agents converged: a stream read
			// during the event would compete with it (4,000 link
			// transitions). The event's own timestamp, same clock.
			if at, err := planeEvent(ctx, fd, detectPlane, detectTo, trigger); err == nil {
				c.Detect = at.Sub(trigger)
			} else {
				logger.Warn("plane event not found in the history", "plane", detectPlane, "to", detectTo, "err", err)
			}
		}
		// The generation agents end on, and when it was announced.
		rec.mu.Lock()
		var last uint64
		for _, n := range names {
			last = max(last, rec.applied[n].gen)
		}
		rec.mu.Unlock()
		if at, ok := genTimes.when(last); ok {
			c.Published = at.Sub(trigger)
			var del []time.Duration
			for _, t := range times {
				del = append(del, max(t.Sub(at), 0))
			}
			c.Delivery = quantiles(del)
		}
		after := readPolicyCounters(ctx, fd, before.fresh)
		c.Writes, c.Bytes, c.Generations = after.writes-before.writes, after.bytes-before.bytes, after.publications-before.publications
		c.ComputeSec, c.WriteSec = after.compute-before.compute, after.write-before.write
		c.CPU = cpu1 - before.cpu
		return c
	}
	has := func(plane string) func(appliedDoc) bool {
		return func(d appliedDoc) bool { return slices.Contains(d.planes, plane) }
	}
	lacks := func(plane string) func(appliedDoc) bool {
		return func(d appliedDoc) bool { return !slices.Contains(d.planes, plane) }
	}

	// A plane fails at its switches: every port DOWN, through gNMI.
	var planeSwitches []*gnmisim.Switch
	for i, sw := range fleet.Switches {
		if i%cfg.Planes == 0 {
			planeSwitches = append(planeSwitches, sw)
		}
	}
	before := readPolicyCounters(ctx, fd, true)
	t0 := time.Now()
	setPlane(planeSwitches, "DOWN")
	res.Injection = time.Since(t0)
	res.PlaneDown = measure(t0, before, "p0", "down", lacks("p0"))
	logger.Info("plane down converged", "p99", res.PlaneDown.Latency.P99, "missing", res.PlaneDown.Missing)

	before = readPolicyCounters(ctx, fd, true)
	t0 = time.Now()
	setPlane(planeSwitches, "UP")
	res.PlaneUp = measure(t0, before, "p0", "healthy", has("p0"))
	logger.Info("plane up converged", "p99", res.PlaneUp.Latency.P99, "missing", res.PlaneUp.Missing)

	// Drain and undrain p1, one operation a second.
	startCounters := readPolicyCounters(ctx, fd, true)
	cpu0, _ := cpuSeconds(fd.Pid())
	cyclesStart := time.Now()
	for i := 0; i < cfg.DrainCycles && ctx.Err() == nil; i++ {
		next := time.Now().Add(time.Second)
		t := time.Now()
		id, err := drain(ctx, fd, "p1")
		if err != nil {
			return nil, err
		}
		c := measure(t, nil, "", "", lacks("p1"))
		res.Drains = append(res.Drains, c)
		sleep(ctx, time.Until(next))
		next = time.Now().Add(time.Second)
		t = time.Now()
		if err := undrain(ctx, fd, id); err != nil {
			return nil, err
		}
		c = measure(t, nil, "", "", has("p1"))
		res.Drains = append(res.Drains, c)
		sleep(ctx, time.Until(next))
	}
	cpu1, _ := cpuSeconds(fd.Pid())
	res.FabricdCPUPerSec = (cpu1 - cpu0) / time.Since(cyclesStart).Seconds()
	if len(res.Drains) > 0 {
		end := readPolicyCounters(ctx, fd, true)
		res.DrainWrites, res.DrainBytes = end.writes-startCounters.writes, end.bytes-startCounters.bytes
	}
	return res, ctx.Err()
}

// policyCounters are fabricd's publication counters and its CPU time.
type policyCounters struct {
	writes, bytes, publications, compute, write, cpu float64
	fresh                                            bool // read past fabricd's /metrics cache
}

// metricsCacheTTL is how old fabricd's /metrics answer may be
// (api.openRouteCacheTTL), with a margin.
const metricsCacheTTL = 1100 * time.Millisecond

// readPolicyCounters reads the counters from one /metrics answer; fresh
// waits out fabricd's cache first, so the answer is gathered now.
func readPolicyCounters(ctx context.Context, fd *fabricdproc.Proc, fresh bool) *policyCounters {
	if fresh {
		sleep(ctx, metricsCacheTTL)
	}
	c := &policyCounters{fresh: fresh}
	if body, err := scrape(ctx, fd); err == nil {
		for name, v := range map[string]*float64{"multiplane_policy_etcd_writes_total": &c.writes,
			"multiplane_policy_etcd_written_bytes_total": &c.bytes, "multiplane_policy_publications_total": &c.publications,
			"multiplane_policy_compute_duration_seconds_sum": &c.compute, "multiplane_policy_publish_duration_seconds_sum": &c.write} {
			*v, _ = sumMetric(bytes.NewReader(body), name)
		}
	}
	c.cpu, _ = cpuSeconds(fd.Pid())
	return c
}

func setPlane(sws []*gnmisim.Switch, oper string) {
	var wg sync.WaitGroup
	for _, sw := range sws {
		wg.Go(func() {
			for _, p := range sw.Ports() {
				sw.SetOperStatus(p, oper)
			}
		})
	}
	wg.Wait()
}

// planeEvent returns when fabricd's health engine took plane to state to,
// the first such transition since since, from the event history (waiting
// up to a few seconds for the history writer).
func planeEvent(ctx context.Context, fd *fabricdproc.Proc, plane, to string, since time.Time) (time.Time, error) {
	q := url.Values{"subject_kind": {"plane"}, "subject": {plane}, "since": {since.UTC().Format(time.RFC3339Nano)}, "limit": {"100"}}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var page struct {
			Items []planes.Event `json:"items"`
		}
		if err := fd.GetJSON(ctx, "/api/v1/events?"+q.Encode(), &page); err != nil {
			return time.Time{}, err
		}
		for _, e := range page.Items {
			if e.Kind == planes.EventStateChange && e.To == to {
				return e.At, nil
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("no transition of plane %s to %s since %s", plane, to, since.Format(time.RFC3339Nano))
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// generationTimes records when each generation key arrived.
type generationTimes struct {
	mu    sync.Mutex
	times map[uint64]time.Time
}

func (g *generationTimes) when(gen uint64) (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t, ok := g.times[gen]
	return t, ok
}

func watchGenerations(ctx context.Context, cli *clientv3.Client) *generationTimes {
	g := &generationTimes{times: map[uint64]time.Time{}}
	go func() {
		for resp := range cli.Watch(ctx, contract.KeyGeneration) {
			now := time.Now()
			for _, ev := range resp.Events {
				var d contract.GenerationDoc
				if json.Unmarshal(ev.Kv.Value, &d) == nil {
					g.mu.Lock()
					g.times[d.Generation] = now
					g.mu.Unlock()
				}
			}
		}
	}()
	return g
}

func drain(ctx context.Context, fd *fabricdproc.Proc, plane string) (int64, error) {
	body, _ := json.Marshal(map[string]string{"subject_kind": "plane", "subject": plane, "reason": "convergence benchmark"})
	resp, err := fd.Do(ctx, http.MethodPost, "/api/v1/drains?force=true", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out struct{ Drain struct{ ID int64 } }
	if resp.StatusCode != http.StatusCreated || json.NewDecoder(resp.Body).Decode(&out) != nil {
		return 0, fmt.Errorf("e2e: drain: %s", resp.Status)
	}
	return out.Drain.ID, nil
}

func undrain(ctx context.Context, fd *fabricdproc.Proc, id int64) error {
	resp, err := fd.Do(ctx, http.MethodDelete, fmt.Sprintf("/api/v1/drains/%d", id), nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return errors.New("e2e: undrain: " + resp.Status)
	}
	return nil
}

// writeHeapProfile writes this process's heap profile to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
