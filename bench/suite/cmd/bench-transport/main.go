// Command bench-transport runs the transport benchmark suite (package
// bench/suite) on a network-namespace fabric and writes
// docs/benchmarks/transport.md, transport.png and raw JSON lines. It needs
// root; scripts/bench-transport builds it and the endpoint binary and runs
// it. Every flag has an environment twin BENCH_TRANSPORT_<FLAG>.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/multiplane/multiplane/bench"
	"github.com/multiplane/multiplane/bench/suite"
	"github.com/multiplane/multiplane/internal/cliconf"
)

func main() { os.Exit(run()) }

func run() int {
	var (
		cfg                      suite.Config
		scenarios, modes, losses string
	)
	fs := flag.NewFlagSet("bench-transport", flag.ContinueOnError)
	fs.StringVar(&cfg.Endpoint, "endpoint", "", "path of the endpoint binary (required)")
	fs.StringVar(&scenarios, "scenarios", strings.Join(suite.ScenarioNames(), ","), "scenarios to run: R1 (4x200 Mbit/s, MTU 1500), R2 (4x1 Gbit/s, MTU 9000), R3-8 (8x100 Mbit/s), R3-4 (4x100 Mbit/s), "+
		"C1 (R1 with -q 4000), I1-1 and I1-500 (8 hosts into 1 on R1's planes, -q 1 or 500 each), L1 (64-byte round trips on R1 per poll mode)")
	fs.StringVar(&modes, "modes", "multipath,gbn,mptcp,tcp", "modes to run (endpoint bench --mode)")
	fs.StringVar(&losses, "losses", "0,0.01", "loss rates (0.01 = 1%)")
	fs.IntVar(&cfg.Runs, "runs", 3, "runs per figure; the median is reported")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "duration of each run (L1: of its round trips)")
	fs.IntVar(&cfg.Size, "size", 65536, "message size in bytes (endpoint bench -s)")
	fs.IntVar(&cfg.Conns, "q", 1, "connections per run (endpoint bench -q) where the scenario does not set it")
	fs.StringVar(&cfg.MPTCPPM, "mptcp-pm", "subflow", "kernel MPTCP set-up: subflow (client endpoints per plane) or signal (server announces its planes)")
	fs.StringVar(&cfg.Poll, "poll", "", "transport poll mode for multipath/gbn: adaptive, busy or blocking (default: the transport's; L1 runs each unless set)")
	fs.StringVar(&cfg.OutDir, "out", filepath.Join("docs", "benchmarks"), "output directory for transport.md, transport.png and raw/")
	fs.StringVar(&cfg.ProfileDir, "profile-dir", "", "write a Go CPU profile of every multipath/gbn server and client process here (<scenario>-<mode>-loss<L>-run<N>-<server|clientH>.pprof; profiling costs CPU, so figures of such a run are not comparable)")
	verbose := fs.Bool("v", false, "log fabric set-up")
	if err := cliconf.Parse(fs, os.Args[1:], "BENCH_TRANSPORT"); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		fmt.Fprintln(os.Stderr, "bench-transport:", err)
		return 2
	}
	if cfg.ProfileDir != "" {
		dir, err := filepath.Abs(cfg.ProfileDir)
		if err == nil {
			err = os.MkdirAll(dir, 0o755)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-transport: --profile-dir:", err)
			return 2
		}
		cfg.ProfileDir = dir
	}
	cfg.Scenarios = cliconf.SplitList(scenarios)
	for _, m := range cliconf.SplitList(modes) {
		cfg.Modes = append(cfg.Modes, bench.Mode(m))
	}
	for _, l := range cliconf.SplitList(losses) {
		v, err := strconv.ParseFloat(l, 64)
		if err != nil || v < 0 || v > 1 {
			fmt.Fprintf(os.Stderr, "bench-transport: --losses: %q is not a loss rate in 0..1\n", l)
			return 2
		}
		cfg.Losses = append(cfg.Losses, v)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench-transport: needs root (network namespaces)")
		return 2
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	cfg.Progress = os.Stderr
	cfg.Command = "scripts/bench-transport " + strings.Join(os.Args[1:], " ")
	if cmd := os.Getenv("BENCH_TRANSPORT_COMMAND"); cmd != "" {
		cfg.Command = cmd
	}
	cfg.Source = os.Getenv("BENCH_TRANSPORT_SOURCE")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := suite.Execute(ctx, cfg)
	if rep == nil {
		fmt.Fprintln(os.Stderr, "bench-transport:", err)
		return 1
	}
	if werr := write(rep); werr != nil {
		fmt.Fprintln(os.Stderr, "bench-transport:", werr)
		return 1
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-transport: stopped early:", err)
		return 1
	}
	return 0
}

func write(rep *suite.Report) error {
	dir := rep.Config.OutDir
	md, err := os.Create(filepath.Join(dir, "transport.md"))
	if err != nil {
		return err
	}
	if err := suite.WriteMarkdown(md, rep); err != nil {
		md.Close()
		return err
	}
	if err := md.Close(); err != nil {
		return err
	}
	pngf, err := os.Create(filepath.Join(dir, "transport.png"))
	if err != nil {
		return err
	}
	if err := suite.WriteChart(pngf, rep); err != nil {
		pngf.Close()
		return err
	}
	if err := pngf.Close(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench-transport: wrote %s and %s\n", md.Name(), pngf.Name())
	var lat bytes.Buffer
	if ok, err := suite.WriteLatencyChart(&lat, rep); err != nil || !ok {
		return err
	}
	name := filepath.Join(dir, "transport-latency.png")
	if err := os.WriteFile(name, lat.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench-transport: wrote %s\n", name)
	return nil
}
