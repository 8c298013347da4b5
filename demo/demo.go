// Package demo runs a whole Multiplane on one machine, without root: a
// userspace multi-plane fabric, one emulated gNMI switch per plane fed by
// the fabric's own counters, fabricd (the real binary, with its private
// PostgreSQL and embedded etcd), one endpoint agent and transport per host,
// and steady traffic between host pairs. `make demo` runs it.
//
//	err := demo.Run(ctx, demo.DefaultConfig(), logger) // until ctx ends
package demo

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/multiplane/multiplane/agent"
	"github.com/multiplane/multiplane/fabricsim/userspace"
	"github.com/multiplane/multiplane/internal/fabricdproc"
	"github.com/multiplane/multiplane/transport"
)

// Config sizes the demo.
type Config struct {
	DataDir    string
	Listen     string
	FabricdBin string
	Hosts      int   // even: hosts talk in pairs
	Planes     int   //
	RateBps    int64 // per plane port
	Message    int   // bytes per message
	Report     time.Duration
	// FailPlane is taken down at FailAt for FailFor (-1: never), to show
	// detection, re-steering and recovery.
	FailPlane       int
	FailAt, FailFor time.Duration
	Out             io.Writer // the running report
	// EtcdEndpoints, when set, is an external etcd for fabricd and the
	// agents (default: fabricd's embedded one).
	EtcdEndpoints []string
	// FabricdArgs are more fabricd flags.
	FabricdArgs []string
	// FabricPort is the userspace fabric's UDP port (0: its default).
	FabricPort int
	// NoHosts starts the fabric, switches and fabricd only: no transports,
	// agents or traffic (tests bring their own).
	NoHosts bool
	// Ring sends from every host to the next (the last to the first), so
	// each host sends to one peer and receives from another; the default
	// is pairs, host-a→host-b, host-c→host-d, ...
	Ring bool
	// WrapApplier, if set, wraps each agent's applier (tests record what
	// the agents apply).
	WrapApplier func(endpoint string, a agent.Applier) agent.Applier
	// Duration, if set, ends the demo after it with a summary (detection
	// and recovery times, traffic on the failed plane before, during and
	// after, convergence); 0 runs until interrupted.
	Duration time.Duration
}

// flows are the (sender, receiver) host pairs of the traffic.
func (c Config) flows() [][2]int {
	var out [][2]int
	for h := 0; h < c.Hosts; h++ {
		switch {
		case c.Ring:
			out = append(out, [2]int{h, (h + 1) % c.Hosts})
		case h%2 == 0:
			out = append(out, [2]int{h, h + 1})
		}
	}
	return out
}

// DefaultConfig returns the `make demo` settings.
func DefaultConfig() Config {
	return Config{DataDir: "var", Listen: "127.0.0.1:8080", FabricdBin: "bin/fabricd", Hosts: 8, Planes: 4,
		// 8 hosts × 4 planes at 50 Mbit/s fit 2 cores: a pair reaches ~97%.
		RateBps: 50e6, Message: 256 << 10, Report: 5 * time.Second,
		FailPlane: 1, FailAt: 30 * time.Second, FailFor: 30 * time.Second, Out: os.Stdout}
}

func hostName(h int) string { return fmt.Sprintf("host-%c", 'a'+h) }

// Run runs the demo until ctx ends (or Duration passes, then prints a
// summary), then stops everything it started.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	if cfg.FailPlane < -1 || cfg.FailPlane >= cfg.Planes {
		return fmt.Errorf("--fail-plane %d: want -1 (none) or a plane from 0 to %d", cfg.FailPlane, cfg.Planes-1)
	}
	env, err := Start(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer env.Close()
	var fails failTimes
	if cfg.FailPlane >= 0 {
		env.wg.Go(func() { failPlane(env.ctx, cfg, env.Fabric, &fails) })
	}
	token := filepath.Join(cfg.DataDir, "admin.token")
	api := env.Fabricd.URL()
	fmt.Fprintf(cfg.Out, `
Multiplane demo: %d hosts, %d planes of %d Mbit/s (userspace fabric), one gNMI switch per plane.
  dashboard  %s/   (log in with the token in %s)
  API        %s/api/v1
  try        bin/fabricctl --server %s --token-file %s planes
  drain p1   bin/fabricctl --server %s --token-file %s drain plane p1 --reason demo --dry-run
  fail p2    bin/fabricctl --server %s --token-file %s demo fail plane p2   (or a port: demo fail port host-a p2;
             restore with demo restore ...; the dashboard has the same buttons)
  logs       %s
Ctrl-C stops everything.

`, cfg.Hosts, cfg.Planes, cfg.RateBps/1e6, api, token, api, api, token, api, token, api, token, env.Fabricd.LogPath)
	// The report ends with ctx, or after Duration; the system still runs
	// for the summary.
	rctx := ctx
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	samples := env.traffic.report(rctx, env.Fabricd)
	if cfg.Duration > 0 && ctx.Err() == nil {
		summarize(cfg, env, &fails, samples)
	}
	return nil
}

// failTimes is when failPlane took the plane down and brought it back.
type failTimes struct {
	mu               sync.Mutex
	failed, restored time.Time
}

// failPlane takes a plane down at the switch, then brings it back.
func failPlane(ctx context.Context, cfg Config, fab *userspace.Fabric, times *failTimes) {
	for _, step := range []struct {
		after time.Duration
		up    bool
	}{{cfg.FailAt, false}, {cfg.FailFor, true}} {
		select {
		case <-ctx.Done():
			return
		case <-time.After(step.after):
		}
		fab.SetUp(cfg.FailPlane, step.up)
		times.mu.Lock()
		if step.up {
			times.restored = time.Now()
		} else {
			times.failed = time.Now()
		}
		times.mu.Unlock()
		state := "DOWN"
		if step.up {
			state = "back UP"
		}
		fmt.Fprintf(cfg.Out, "%s >>> plane p%d %s at the switch\n", time.Now().Format("15:04:05"), cfg.FailPlane, state)
	}
}

// traffic moves messages between host pairs and reports what it sees.
type traffic struct {
	cfg    Config
	fab    *userspace.Fabric
	hosts  []*transport.Transport
	logger *slog.Logger

	mu    sync.Mutex
	bytes map[int]uint64 // receiving host → message bytes received
}

func (tr *traffic) peer(h int) []netip.AddrPort {
	out := make([]netip.AddrPort, tr.cfg.Planes)
	for p := range out {
		out[p] = tr.fab.PeerAddr(h, p)
	}
	return out
}

func (tr *traffic) send(ctx context.Context, from, to int) {
	msg := make([]byte, tr.cfg.Message)
	rand.Read(msg)
	for ctx.Err() == nil {
		c, err := tr.hosts[from].Dial(ctx, tr.peer(to))
		if err != nil {
			tr.logger.Debug("dial failed; retrying", "from", hostName(from), "err", err)
			time.Sleep(time.Second)
			continue
		}
		if err := tr.stream(ctx, c, msg); err != nil && ctx.Err() == nil {
			tr.logger.Info("connection ended; redialing", "from", hostName(from), "err", err)
		}
		c.Close()
	}
}

// inFlight is how many messages a flow keeps queued: with one (Send), each
// message's last round trip left the paths idle, and a pair carried 59%
// of its planes.
const inFlight = 4

// stream sends msg over c again and again, inFlight at a time, until ctx
// ends or the connection fails.
func (tr *traffic) stream(ctx context.Context, c *transport.Conn, msg []byte) error {
	var queued []*transport.Completion
	for ctx.Err() == nil {
		if len(queued) == inFlight {
			if err := queued[0].Wait(ctx); err != nil {
				return err
			}
			queued = queued[1:]
		}
		comp, err := c.SendAsync(ctx, msg)
		if err != nil {
			return err
		}
		queued = append(queued, comp)
	}
	return ctx.Err()
}

func (tr *traffic) receive(ctx context.Context, h int) {
	for ctx.Err() == nil {
		c, err := tr.hosts[h].Accept(ctx)
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			for {
				msg, err := c.Recv(ctx)
				if err != nil {
					return
				}
				tr.mu.Lock()
				if tr.bytes == nil {
					tr.bytes = map[int]uint64{}
				}
				tr.bytes[h] += uint64(len(msg))
				tr.mu.Unlock()
			}
		}()
	}
}

// planeStates reads the plane states from fabricd's API. The read is not
// cut short by the end of the report (a last tick as --duration ends
// printed "?"), only bounded.
func planeStates(ctx context.Context, fd *fabricdproc.Proc) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	var body struct {
		Items []struct{ Name, State string }
	}
	if err := fd.GetJSON(ctx, "/api/v1/planes", &body); err != nil {
		return "unreachable (" + err.Error() + ")"
	}
	var out []string
	for _, p := range body.Items {
		out = append(out, p.Name+"="+p.State)
	}
	return strings.Join(out, " ")
}

// report prints goodput per flow, traffic per plane and plane states.
// sample is one report interval's figures.
type sample struct {
	at        time.Time
	goodput   float64   // delivered message bits/s, all flows
	flows     []float64 // delivered message bits/s, per flow
	planeBits []float64 // forwarded bits/s per plane
}

func (tr *traffic) report(ctx context.Context, fd *fabricdproc.Proc) []sample {
	t := time.NewTicker(tr.cfg.Report)
	defer t.Stop()
	last := map[int]uint64{}
	lastPlane := make([]uint64, tr.cfg.Planes)
	var samples []sample
	for {
		select {
		case <-ctx.Done():
			return samples
		case <-t.C:
		}
		s := sample{at: time.Now(), planeBits: make([]float64, tr.cfg.Planes)}
		tr.mu.Lock()
		line := ""
		for _, f := range tr.cfg.flows() {
			got := tr.bytes[f[1]]
			bits := float64(got-last[f[1]]) * 8 / tr.cfg.Report.Seconds()
			s.goodput += bits
			s.flows = append(s.flows, bits)
			line += fmt.Sprintf("%s→%s %6.1f Mbit/s  ", hostName(f[0]), hostName(f[1]), bits/1e6)
			last[f[1]] = got
		}
		tr.mu.Unlock()
		line += "| Mbit/s per plane:"
		for p := 0; p < tr.cfg.Planes; p++ {
			var tx uint64
			for _, port := range tr.fab.Stats(p).Ports {
				tx += port.Counters.OutOctets
			}
			s.planeBits[p] = float64(tx-lastPlane[p]) * 8 / tr.cfg.Report.Seconds()
			line += fmt.Sprintf(" p%d %5.1f", p, s.planeBits[p]/1e6)
			lastPlane[p] = tx
		}
		samples = append(samples, s)
		fmt.Fprintln(tr.cfg.Out, time.Now().Format("15:04:05"), line, "| fabricd:", planeStates(ctx, fd))
	}
}

// summarize prints what the demo showed: when fabricd saw the failed plane
// go down and come back, the traffic on it and in all before, during and
// after, and how far the agents converged.
func summarize(cfg Config, env *Env, fails *failTimes, samples []sample) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := cfg.Out
	fmt.Fprintf(out, "\nSummary after %v:\n", cfg.Duration)
	fails.mu.Lock()
	failed, restored := fails.failed, fails.restored
	fails.mu.Unlock()
	plane := fmt.Sprintf("p%d", cfg.FailPlane)
	// firstChange is when fabricd recorded the plane leaving healthy (down)
	// or coming back to it (!down) after t.
	firstChange := func(t time.Time, down bool) string {
		var evs struct {
			Items []struct {
				At       time.Time
				From, To string
			}
		}
		q := "/api/v1/events?subject_kind=plane&subject=" + plane + "&since=" + t.UTC().Format(time.RFC3339Nano)
		if err := env.Fabricd.GetJSON(ctx, q, &evs); err != nil {
			return "unknown (" + err.Error() + ")"
		}
		for _, e := range evs.Items {
			if (down && e.From == "healthy") || (!down && e.To == "healthy") {
				return fmt.Sprintf("%v (%s → %s)", e.At.Sub(t).Round(time.Millisecond), e.From, e.To)
			}
		}
		return "not seen"
	}
	if !failed.IsZero() {
		fmt.Fprintf(out, "  %s failed at its switch at %s; fabricd saw it after %s\n", plane, failed.Format("15:04:05"), firstChange(failed, true))
	}
	if !restored.IsZero() {
		fmt.Fprintf(out, "  %s restored at %s; fabricd saw it healthy after %s (after the up hold)\n", plane, restored.Format("15:04:05"), firstChange(restored, false))
	}
	// Traffic per phase (report intervals wholly inside it).
	phase := func(name string, from, to time.Time) {
		var planeBits, goodput float64
		n := 0
		for _, s := range samples {
			if s.at.Add(-cfg.Report).Before(from) || (!to.IsZero() && s.at.After(to)) {
				continue
			}
			if cfg.FailPlane >= 0 {
				planeBits += s.planeBits[cfg.FailPlane]
			}
			goodput += s.goodput
			n++
		}
		if n == 0 {
			return
		}
		if cfg.FailPlane < 0 {
			fmt.Fprintf(out, "  %-7s all flows delivered %6.1f Mbit/s (%d intervals)\n", name, goodput/float64(n)/1e6, n)
			return
		}
		fmt.Fprintf(out, "  %-7s %s carried %6.1f Mbit/s; all flows delivered %6.1f Mbit/s (%d intervals)\n",
			name, plane, planeBits/float64(n)/1e6, goodput/float64(n)/1e6, n)
	}
	// What one flow reached while every plane was up, against its
	// host's ports: the fabric's and transport's headroom.
	var flowBits float64
	n := 0
	for _, s := range samples[min(1, len(samples)):] { // the first interval holds the dials
		if !failed.IsZero() && s.at.After(failed) && (restored.IsZero() || s.at.Add(-cfg.Report).Before(restored.Add(5*time.Second))) {
			continue // the interval overlaps the failure or the return
		}
		for _, b := range s.flows {
			flowBits += b
			n++
		}
	}
	if n > 0 {
		flowBits /= float64(n)
		fmt.Fprintf(out, "  a flow delivered %.1f Mbit/s on average with every plane up: %.1f%% of its host's %d planes\n",
			flowBits/1e6, 100*flowBits/float64(int64(cfg.Planes)*cfg.RateBps), cfg.Planes)
	}
	start := time.Time{}
	if len(samples) > 0 {
		start = samples[0].at.Add(-cfg.Report)
	}
	switch {
	case failed.IsZero():
		phase("all", start, time.Time{})
	default:
		phase("before", start, failed)
		phase("during", failed, restored)
		if !restored.IsZero() {
			phase("after", restored, time.Time{})
		}
	}
	var conv struct {
		TargetGeneration   uint64 `json:"target_generation"`
		Endpoints, Applied int
	}
	if err := env.Fabricd.GetJSON(ctx, "/api/v1/convergence", &conv); err == nil {
		fmt.Fprintf(out, "  agents: %d of %d applied generation %d\n", conv.Applied, conv.Endpoints, conv.TargetGeneration)
	}
}
