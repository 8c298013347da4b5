// Package suite is the transport benchmark suite behind
// scripts/bench-transport: on a two-host network-namespace fabric
// (package fabricsim/netns) it runs `endpoint bench` in every mode
// (multipath, gbn, mptcp, tcp), at every loss rate, for every scenario, takes
// the median of several runs, and writes docs/benchmarks/transport.md, a PNG
// bar chart and the raw JSON lines.
//
// Scenarios (the transport issues'): R1 = 4 planes × 200 Mbit/s, MTU 1500;
// R2 = 4 × 1 Gbit/s, MTU 9000; R3 = 8 × 100 Mbit/s against 4 × 100 Mbit/s,
// MTU 1500; C1 = R1 with 4,000 connections; I1 = incast, 8 hosts into one
// on R1's planes, 1 or 500 connections per sender; L1 = 64-byte round trips
// on R1 per poll mode. The last host is the server, the others clients;
// the rate is shaped on the switch port towards each host, and loss is
// dropped in the switches in both directions.
//
// Kernel MPTCP gets one subflow per plane: limits "subflow 8
// add_addr_accepted 8" on both hosts, and on the client one endpoint
// "ip mptcp endpoint add 10.77.p.1 dev p<p> subflow" per extra plane
// (MPTCPPM "subflow", the default), or on the server one "signal" endpoint
// per extra plane (MPTCPPM "signal").
package suite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/multiplane/multiplane/bench"
	"github.com/multiplane/multiplane/fabricsim/netns"
)

// Scenario is one fabric shape and workload.
type Scenario struct {
	Name    string // R1, R2, R3-8, R3-4, C1, I1-1, I1-500, L1, S1
	Planes  int
	RateBps int64 // per plane
	MTU     int
	Senders int  // client hosts, each running one client into the last host (0 = 1)
	Conns   int  // -q of each client (0 = Config.Conns)
	Latency bool // --lat: 64-byte ping-pong per poll mode instead of throughput
	// RateStep: the client's egress cap (stepFrom) is halved halfway through
	// the run, and the server's 10 ms series shows how soon it is obeyed.
	RateStep bool
	// Grant: the server grants its line rate to its senders
	// (--ingress-budget, multipath and gbn), max-min fair per client.
	Grant  bool
	Losses []float64    // loss rates run (nil = Config.Losses)
	Modes  []bench.Mode // modes run, of those configured (nil = all)
}

// LineRate is the server's aggregate ingress rate in bit/s.
func (s Scenario) LineRate() float64 { return float64(s.Planes) * float64(s.RateBps) }

// IngressBudget is the server's line rate in the datagram bytes its
// senders pace (UDP payload: MTU-28 of each MTU+14 bytes an Ethernet port
// shapes).
func (s Scenario) IngressBudget() float64 {
	return s.LineRate() * float64(s.MTU-28) / float64(s.MTU+14)
}

// Hosts is the number of hosts of the scenario's fabric.
func (s Scenario) Hosts() int { return max(1, s.Senders) + 1 }

// Throughput reports whether the scenario belongs in the goodput table and
// chart (L1 and S1 have their own).
func (s Scenario) Throughput() bool { return !s.Latency && !s.RateStep }

// Incast reports whether several clients send to one server.
func (s Scenario) Incast() bool { return s.Senders > 1 }

// atScale are the modes of the scale scenarios: gbn is a one-path baseline
// and is left out there.
var atScale = []bench.Mode{bench.ModeMultipath, bench.ModeMPTCP, bench.ModeTCP}

// Scenarios are the issues' scenarios, in report order.
var Scenarios = []Scenario{
	{Name: "R1", Planes: 4, RateBps: 200e6, MTU: 1500},
	{Name: "R2", Planes: 4, RateBps: 1e9, MTU: 9000},
	{Name: "R3-8", Planes: 8, RateBps: 100e6, MTU: 1500},
	{Name: "R3-4", Planes: 4, RateBps: 100e6, MTU: 1500},
	{Name: "C1", Planes: 4, RateBps: 200e6, MTU: 1500, Conns: 4000, Modes: atScale},
	{Name: "I1-1", Planes: 4, RateBps: 200e6, MTU: 1500, Senders: 8, Conns: 1, Grant: true, Losses: []float64{0}, Modes: atScale},
	{Name: "I1-500", Planes: 4, RateBps: 200e6, MTU: 1500, Senders: 8, Conns: 500, Grant: true, Losses: []float64{0}, Modes: atScale},
	{Name: "L1", Planes: 4, RateBps: 200e6, MTU: 1500, Latency: true, Losses: []float64{0}, Modes: atScale},
	{Name: "S1", Planes: 4, RateBps: 200e6, MTU: 1500, RateStep: true, Losses: []float64{0}, Modes: []bench.Mode{bench.ModeMultipath}},
}

// ScenarioNames is every scenario's name, in report order.
func ScenarioNames() []string {
	var names []string
	for _, s := range Scenarios {
		names = append(names, s.Name)
	}
	return names
}

// latencyPolls are the poll modes L1 runs multipath and gbn in.
var latencyPolls = []string{"busy", "adaptive", "blocking"}

// Config configures a suite run.
type Config struct {
	Endpoint  string        // path of the endpoint binary
	Scenarios []string      // names to run (default all)
	Modes     []bench.Mode  // default all
	Losses    []float64     // default 0 and 0.01
	Runs      int           // per figure, the median is reported (default 3)
	Duration  time.Duration // per run (default 10s; L1: per size)
	Size      int           // message size (default 65536; L1: 64)
	Conns     int           // -q where the scenario does not fix it (default 1)
	MPTCPPM   string        // "subflow" (default) or "signal"
	Poll      string        // endpoint bench --poll for multipath/gbn ("" = transport default)
	OutDir    string        // transport.md and transport.png go here (default docs/benchmarks)
	// ProfileDir, if set, gets a CPU profile of every multipath/gbn process.
	ProfileDir string
	Command    string // how the suite was invoked, for the report
	Source     string // which source was measured (commit), for the report
	Logger     *slog.Logger
	Progress   io.Writer // one line per run; nil discards
}

// Run is one bench run's outcome.
type Run struct {
	Scenario string        `json:"scenario"`
	Planes   int           `json:"planes"`
	RateBps  int64         `json:"rate_bps"`
	MTU      int           `json:"mtu"`
	Loss     float64       `json:"loss"`
	Mode     bench.Mode    `json:"mode"`
	Poll     string        `json:"poll,omitempty"` // L1: the poll mode (multipath, gbn)
	Index    int           `json:"run"`
	Result   *bench.Result `json:"result,omitempty"` // the client's; incast: the server's (every client)
	Error    string        `json:"error,omitempty"`
	Time     time.Time     `json:"time"`
	LoadAvg  string        `json:"loadavg"` // 1, 5, 15 min, when the run started
	// WallSeconds is from starting the clients to the last one's exit.
	WallSeconds float64 `json:"wall_seconds"`
	// PacketsSent is what the clients' interfaces sent during the run,
	// SwitchDrops what the switch ports' shapers dropped (queue full).
	PacketsSent uint64 `json:"packets_sent"`
	SwitchDrops uint64 `json:"switch_drops"`
	// Step is S1's figure, from the server's series.
	Step *StepFigure `json:"rate_step,omitempty"`
	// ClientIO is each client's socket I/O (incast; Result has the
	// server's): datagrams per send call show how well senders batch.
	ClientIO []*bench.IOStats `json:"client_io,omitempty"`
}

// StepFigure is how a run obeyed a halved egress cap (S1).
type StepFigure struct {
	// SettleMs is from the change to the first 10 ms bucket from which the
	// goodput conforms to the new cap (+5%, bench.Series.Settle); -1 never.
	SettleMs float64 `json:"settle_ms"`
	// EgressSettleMs is the same for the client's egress series (what its
	// pacers released), free of the fabric's and receiver's jitter.
	EgressSettleMs float64 `json:"egress_settle_ms"`
	CapBefore      float64 `json:"cap_before_bps"`
	CapAfter       float64 `json:"cap_after_bps"`
	GoodBefore     float64 `json:"goodput_before_bps"` // mean from 0.5 s to the change
	GoodAfter      float64 `json:"goodput_after_bps"`  // mean from 50 ms after it to the end
}

// Figure is the median of a (scenario, loss, mode, poll) cell.
type Figure struct {
	Scenario    Scenario
	Loss        float64
	Mode        bench.Mode
	Poll        string  // L1
	Goodput     float64 // median bit/s; 0 with Err
	Runs        []float64
	Retrans     int64               // median retransmits (-1 unknown)
	Jain        float64             // median Jain's index: across connections, incast across senders
	FailedConns int                 // most failed connections of a run
	Wall        float64             // median wall seconds
	DropShare   float64             // median switch drops / packets sent
	Latency     *bench.LatencyStats // L1: median of each column
	Step        *StepFigure         // S1: median of each field; SettleMs the worst run's
	Failed      int                 // runs that failed
	Err         string              // the last failure
}

// Report is a whole suite's outcome.
type Report struct {
	Config  Config
	Machine Machine
	Start   time.Time
	End     time.Time
	Figures []Figure
}

// ErrUnavailable marks a mode the endpoint binary does not have.
var ErrUnavailable = errors.New("suite: mode not available")

func (c *Config) defaults() error {
	if c.Endpoint == "" {
		return errors.New("suite: Endpoint (path of the endpoint binary) is required")
	}
	if len(c.Scenarios) == 0 {
		c.Scenarios = ScenarioNames()
	}
	if len(c.Modes) == 0 {
		c.Modes = slices.Clone(bench.Modes)
	}
	if len(c.Losses) == 0 {
		c.Losses = []float64{0, 0.01}
	}
	if c.Runs == 0 {
		c.Runs = 3
	}
	if c.Duration == 0 {
		c.Duration = 10 * time.Second
	}
	if c.Size == 0 {
		c.Size = 65536
	}
	if c.Conns == 0 {
		c.Conns = 1
	}
	if c.MPTCPPM == "" {
		c.MPTCPPM = "subflow"
	}
	if c.OutDir == "" {
		c.OutDir = filepath.Join("docs", "benchmarks")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	for _, name := range c.Scenarios {
		if _, ok := scenario(name); !ok {
			return fmt.Errorf("suite: unknown scenario %q (%s)", name, strings.Join(ScenarioNames(), ", "))
		}
	}
	if c.MPTCPPM != "subflow" && c.MPTCPPM != "signal" {
		return fmt.Errorf("suite: MPTCP path manager set-up %q: want subflow or signal", c.MPTCPPM)
	}
	return nil
}

// lossesOf is the loss rates run in sc.
func (c *Config) lossesOf(sc Scenario) []float64 {
	if sc.Losses == nil {
		return c.Losses
	}
	var out []float64
	for _, l := range sc.Losses {
		if slices.Contains(c.Losses, l) {
			out = append(out, l)
		}
	}
	return out
}

// modesOf is the modes run in sc.
func (c *Config) modesOf(sc Scenario) []bench.Mode {
	if sc.Modes == nil {
		return c.Modes
	}
	var out []bench.Mode
	for _, m := range c.Modes {
		if slices.Contains(sc.Modes, m) {
			out = append(out, m)
		}
	}
	return out
}

// pollsOf is the poll modes mode runs in, in sc: L1 runs multipath and gbn
// in each (or in Config.Poll), everything else once ("": Config.Poll).
func (c *Config) pollsOf(sc Scenario, m bench.Mode) []string {
	switch {
	case !sc.Latency || (m != bench.ModeMultipath && m != bench.ModeGBN):
		return []string{""}
	case c.Poll != "":
		return []string{c.Poll}
	}
	return latencyPolls
}

func scenario(name string) (Scenario, bool) {
	for _, s := range Scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// Execute runs the suite, appending each run's JSON line to the raw file in
// OutDir/raw, and returns the report (also when cancelled part-way: what
// was measured is kept).
func Execute(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	rep := &Report{Config: cfg, Machine: DescribeMachine(), Start: time.Now()}
	rep.Machine.LoadStart = LoadAvg()
	rep.Machine.ProbeStart = CPUProbe()
	if gone, err := netns.CleanupStale(ctx); err == nil && len(gone) > 0 {
		cfg.Logger.Info("removed stale namespaces", "names", gone)
	}
	rawDir := filepath.Join(cfg.OutDir, "raw")
	if err := os.MkdirAll(rawDir, 0o755); err != nil {
		return nil, err
	}
	rawPath := filepath.Join(rawDir, "transport-"+rep.Start.UTC().Format("20060102T150405Z")+".jsonl")
	raw, err := os.Create(rawPath)
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	cfg.Logger.Info("suite started", "raw", rawPath, "runs", cfg.Runs, "duration", cfg.Duration)

	var runs []Run
	var runErr error
scenarios:
	for _, name := range cfg.Scenarios {
		sc, _ := scenario(name)
		rs, err := runScenario(ctx, &cfg, sc, raw)
		runs = append(runs, rs...)
		if err != nil {
			runErr = err
			break scenarios
		}
	}
	rep.End = time.Now()
	rep.Machine.LoadEnd = LoadAvg()
	rep.Machine.ProbeEnd = CPUProbe()
	rep.Figures = figures(&cfg, runs)
	return rep, runErr
}

func figures(cfg *Config, runs []Run) []Figure {
	var out []Figure
	for _, name := range cfg.Scenarios {
		sc, _ := scenario(name)
		for _, loss := range cfg.lossesOf(sc) {
			for _, mode := range cfg.modesOf(sc) {
				for _, poll := range cfg.pollsOf(sc, mode) {
					if fg, ok := figure(sc, loss, mode, poll, runs); ok {
						out = append(out, fg)
					}
				}
			}
		}
	}
	return out
}

// figure is the medians of the runs of one cell; false if it has none.
func figure(sc Scenario, loss float64, mode bench.Mode, poll string, runs []Run) (Figure, bool) {
	fg := Figure{Scenario: sc, Loss: loss, Mode: mode, Poll: poll, Retrans: -1}
	var rt, jain, wall, drops []float64
	var lat [][]float64
	var steps []*StepFigure
	seen := false
	for _, r := range runs {
		if r.Scenario != sc.Name || r.Loss != loss || r.Mode != mode || r.Poll != poll {
			continue
		}
		seen = true
		if r.Result == nil {
			fg.Err = r.Error
			fg.Failed++
			continue
		}
		res := r.Result
		fg.Runs = append(fg.Runs, res.GoodputBps)
		if res.Retransmits != nil {
			rt = append(rt, float64(*res.Retransmits))
		}
		jain = append(jain, jainOf(sc, res))
		wall = append(wall, r.WallSeconds)
		if r.PacketsSent > 0 {
			drops = append(drops, float64(r.SwitchDrops)/float64(r.PacketsSent))
		}
		fg.FailedConns = max(fg.FailedConns, res.FailedConnections)
		if r.Step != nil {
			steps = append(steps, r.Step)
		}
		if len(res.Latency) > 0 {
			l := res.Latency[0]
			lat = append(lat, []float64{l.MinUs, l.TypicalUs, l.P99Us, l.P999Us, l.MaxUs, l.AvgUs, float64(l.Iterations)})
		}
	}
	if !seen {
		return fg, false
	}
	if len(fg.Runs) > 0 {
		fg.Goodput = median(fg.Runs)
		fg.Jain, fg.Wall = median(jain), median(wall)
	}
	if len(rt) > 0 {
		fg.Retrans = int64(median(rt))
	}
	if len(drops) > 0 {
		fg.DropShare = median(drops)
	}
	if len(steps) > 0 {
		fg.Step = stepMedians(steps)
	}
	if len(lat) > 0 {
		col := func(i int) float64 {
			var v []float64
			for _, l := range lat {
				v = append(v, l[i])
			}
			return median(v)
		}
		fg.Latency = &bench.LatencyStats{Bytes: latencySize, MinUs: col(0), TypicalUs: col(1), P99Us: col(2), P999Us: col(3), MaxUs: col(4),
			AvgUs: col(5), Iterations: int(col(6))}
	}
	return fg, true
}

// stepMedians is the median of each field of S1's runs, but the settle
// times: the worst run's (-1 if any run never settled).
func stepMedians(steps []*StepFigure) *StepFigure {
	col := func(f func(*StepFigure) float64) float64 {
		var v []float64
		for _, s := range steps {
			v = append(v, f(s))
		}
		return median(v)
	}
	out := &StepFigure{CapBefore: steps[0].CapBefore, CapAfter: steps[0].CapAfter,
		GoodBefore: col(func(s *StepFigure) float64 { return s.GoodBefore }),
		GoodAfter:  col(func(s *StepFigure) float64 { return s.GoodAfter })}
	out.SettleMs = worstSettle(steps, func(s *StepFigure) float64 { return s.SettleMs })
	out.EgressSettleMs = worstSettle(steps, func(s *StepFigure) float64 { return s.EgressSettleMs })
	return out
}

// worstSettle is the longest of the runs' settle times, -1 if one never
// settled.
func worstSettle(steps []*StepFigure, f func(*StepFigure) float64) float64 {
	worst := 0.0
	for _, s := range steps {
		if f(s) < 0 {
			return -1
		}
		worst = max(worst, f(s))
	}
	return worst
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
