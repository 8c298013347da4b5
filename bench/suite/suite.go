// Package suite is the transport benchmark suite behind
// scripts/bench-transport: on a two-host network-namespace fabric
// (package fabricsim/netns) it runs `endpoint bench` in every mode
// (multipath, gbn, mptcp, tcp), at every loss rate, for every scenario, takes
// the median of several runs, and writes docs/benchmarks/transport.md, a PNG
// bar chart and the raw JSON lines.
//
// Scenarios (the transport issue's): R1 = 4 planes × 200 Mbit/s, MTU 1500;
// R2 = 4 × 1 Gbit/s, MTU 9000; R3 = 8 × 100 Mbit/s against 4 × 100 Mbit/s,
// MTU 1500. Host 0 is the client, host 1 the server; the rate is shaped on
// the switch port towards each host, and loss is dropped in the switches in
// both directions.
//
// Kernel MPTCP gets one subflow per plane: limits "subflow 8
// add_addr_accepted 8" on both hosts, and on the client one endpoint
// "ip mptcp endpoint add 10.77.p.1 dev p<p> subflow" per extra plane
// (MPTCPPM "subflow", the default), or on the server one "signal" endpoint
// per extra plane (MPTCPPM "signal").
package suite

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/multiplane/multiplane/bench"
	"github.com/multiplane/multiplane/fabricsim/netns"
)

// Scenario is one fabric shape.
type Scenario struct {
	Name    string // R1, R2, R3-8, R3-4
	Planes  int
	RateBps int64 // per plane
	MTU     int
}

// LineRate is the fabric's aggregate rate in bit/s.
func (s Scenario) LineRate() float64 { return float64(s.Planes) * float64(s.RateBps) }

// Scenarios are the scenarios, in report order.
var Scenarios = []Scenario{
	{"R1", 4, 200e6, 1500},
	{"R2", 4, 1e9, 9000},
	{"R3-8", 8, 100e6, 1500},
	{"R3-4", 4, 100e6, 1500},
}

// Config configures a suite run.
type Config struct {
	Endpoint  string        // path of the endpoint binary
	Scenarios []string      // names to run (default all)
	Modes     []bench.Mode  // default all
	Losses    []float64     // default 0 and 0.01
	Runs      int           // per figure, the median is reported (default 3)
	Duration  time.Duration // per run (default 10s)
	Size      int           // message size (default 65536)
	Conns     int           // -q (default 1)
	MPTCPPM   string        // "subflow" (default) or "signal"
	Poll      string        // endpoint bench --poll for multipath/gbn ("" = transport default)
	OutDir    string        // transport.md and transport.png go here (default docs/benchmarks)
	Command   string        // how the suite was invoked, for the report
	Source    string        // which source was measured (commit), for the report
	Logger    *slog.Logger
	Progress  io.Writer // one line per run; nil discards
}

// Run is one bench run's outcome.
type Run struct {
	Scenario string        `json:"scenario"`
	Planes   int           `json:"planes"`
	RateBps  int64         `json:"rate_bps"`
	MTU      int           `json:"mtu"`
	Loss     float64       `json:"loss"`
	Mode     bench.Mode    `json:"mode"`
	Index    int           `json:"run"`
	Result   *bench.Result `json:"result,omitempty"`
	Error    string        `json:"error,omitempty"`
	Time     time.Time     `json:"time"`
	LoadAvg  string        `json:"loadavg"` // 1, 5, 15 min, when the run started
}

// Figure is the median of a (scenario, loss, mode) cell.
type Figure struct {
	Scenario Scenario
	Loss     float64
	Mode     bench.Mode
	Goodput  float64 // median bit/s; 0 with Err
	Runs     []float64
	Retrans  int64  // median retransmits (-1 unknown)
	Failed   int    // runs that failed
	Err      string // the last failure
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
		for _, s := range Scenarios {
			c.Scenarios = append(c.Scenarios, s.Name)
		}
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
			return fmt.Errorf("suite: unknown scenario %q (R1, R2, R3-8, R3-4)", name)
		}
	}
	if c.MPTCPPM != "subflow" && c.MPTCPPM != "signal" {
		return fmt.Errorf("suite: MPTCP path manager set-up %q: want subflow or signal", c.MPTCPPM)
	}
	return nil
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

func runScenario(ctx context.Context, cfg *Config, sc Scenario, raw io.Writer) ([]Run, error) {
	planes := make([]netns.PlaneConfig, sc.Planes)
	for i := range planes {
		planes[i] = netns.PlaneConfig{RateBps: sc.RateBps}
	}
	f, err := netns.Start(ctx, netns.Config{Hosts: 2, Planes: planes, MTU: sc.MTU, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := setupMPTCP(ctx, f, cfg.MPTCPPM); err != nil {
		return nil, err
	}
	var runs []Run
	for _, loss := range cfg.Losses {
		for p := range sc.Planes {
			if err := f.SetLoss(ctx, p, loss); err != nil {
				return runs, err
			}
		}
		for _, mode := range cfg.Modes {
			for i := range cfg.Runs {
				r := Run{Scenario: sc.Name, Planes: sc.Planes, RateBps: sc.RateBps, MTU: sc.MTU, Loss: loss, Mode: mode, Index: i, Time: time.Now().UTC(), LoadAvg: LoadAvg()}
				res, err := runOnce(ctx, cfg, f, mode)
				if ctx.Err() != nil {
					return runs, ctx.Err()
				}
				if err != nil {
					r.Error = err.Error()
				} else {
					r.Result = res
				}
				runs = append(runs, r)
				line, _ := json.Marshal(r)
				_, _ = raw.Write(append(line, '\n'))
				if res != nil {
					fmt.Fprintf(cfg.Progress, "%-5s loss %4.1f%% %-9s run %d: %8.1f Mbit/s (%5.1f%% of line rate)\n",
						sc.Name, loss*100, mode, i+1, res.GoodputBps/1e6, 100*res.GoodputBps/sc.LineRate())
				} else {
					fmt.Fprintf(cfg.Progress, "%-5s loss %4.1f%% %-9s run %d: %v\n", sc.Name, loss*100, mode, i+1, err)
				}
				if errors.Is(err, ErrUnavailable) {
					break // the other runs of this mode would say the same
				}
			}
		}
	}
	return runs, nil
}

// setupMPTCP sets the path manager of both hosts for one subflow per plane.
func setupMPTCP(ctx context.Context, f *netns.Fabric, pm string) error {
	for h := range 2 {
		if _, err := f.Exec(ctx, h, "ip", "mptcp", "limits", "set", "subflow", "8", "add_addr_accepted", "8"); err != nil {
			return err
		}
	}
	host, flag := 0, "subflow"
	if pm == "signal" {
		host, flag = 1, "signal"
	}
	for p := 1; p < f.Planes(); p++ {
		if _, err := f.Exec(ctx, host, "ip", "mptcp", "endpoint", "add", f.Addr(host, p).String(), "dev", f.Iface(host, p), flag); err != nil {
			return err
		}
	}
	return nil
}

func addrs(f *netns.Fabric, h int) string {
	var s []string
	for p := range f.Planes() {
		s = append(s, f.Addr(h, p).String())
	}
	return strings.Join(s, ",")
}

// runOnce runs one server and one client and returns the client's result.
func runOnce(ctx context.Context, cfg *Config, f *netns.Fabric, mode bench.Mode) (*bench.Result, error) {
	port := "18515"
	common := []string{"--mode", string(mode), "--port", port, "--interval", "0", "--mtu", strconv.Itoa(f.MTU())}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration+90*time.Second)
	defer cancel()
	if cfg.Poll != "" {
		common = append(common, "--poll", cfg.Poll)
	}
	srv := f.Command(ctx, 1, cfg.Endpoint, append([]string{"bench", "server", "--bind", addrs(f, 1), "--clients", "1",
		"--timeout", (cfg.Duration + 60*time.Second).String()}, common...)...)
	var serr bytes.Buffer
	srv.Stdout, srv.Stderr = io.Discard, &serr
	if err := srv.Start(); err != nil {
		return nil, err
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	cli := f.Command(ctx, 0, cfg.Endpoint, append([]string{"bench", "client", "--bind", addrs(f, 0), "--peer", addrs(f, 1),
		"-s", strconv.Itoa(cfg.Size), "-D", cfg.Duration.String(), "-q", strconv.Itoa(cfg.Conns), "--json"}, common...)...)
	var cerr bytes.Buffer
	cli.Stderr = &cerr
	out, err := cli.Output()
	if err != nil {
		_ = srv.Process.Kill()
		<-srvDone
		msg := strings.TrimSpace(cerr.String())
		if strings.Contains(msg, "not available yet") {
			return nil, fmt.Errorf("%w: %s", ErrUnavailable, lastLine(msg))
		}
		return nil, fmt.Errorf("suite: client: %v: %s (server: %s)", err, lastLine(msg), lastLine(serr.String()))
	}
	select {
	case err := <-srvDone:
		if err != nil {
			return nil, fmt.Errorf("suite: server: %v: %s", err, lastLine(serr.String()))
		}
	case <-time.After(30 * time.Second):
		_ = srv.Process.Kill()
		<-srvDone
		return nil, errors.New("suite: server did not exit after the run")
	}
	var res bench.Result
	if err := json.Unmarshal([]byte(lastLine(string(out))), &res); err != nil {
		return nil, fmt.Errorf("suite: client output: %w", err)
	}
	return &res, nil
}

func lastLine(s string) string {
	var last string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if t := strings.TrimSpace(sc.Text()); t != "" {
			last = t
		}
	}
	return last
}

func figures(cfg *Config, runs []Run) []Figure {
	var out []Figure
	for _, name := range cfg.Scenarios {
		sc, _ := scenario(name)
		for _, loss := range cfg.Losses {
			for _, mode := range cfg.Modes {
				fg := Figure{Scenario: sc, Loss: loss, Mode: mode, Retrans: -1}
				var rt []float64
				seen := false
				for _, r := range runs {
					if r.Scenario != name || r.Loss != loss || r.Mode != mode {
						continue
					}
					seen = true
					if r.Result == nil {
						fg.Err = r.Error
						fg.Failed++
						continue
					}
					fg.Runs = append(fg.Runs, r.Result.GoodputBps)
					if r.Result.Retransmits != nil {
						rt = append(rt, float64(*r.Result.Retransmits))
					}
				}
				if !seen {
					continue
				}
				if len(fg.Runs) > 0 {
					fg.Goodput = median(fg.Runs)
				}
				if len(rt) > 0 {
					fg.Retrans = int64(median(rt))
				}
				out = append(out, fg)
			}
		}
	}
	return out
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
