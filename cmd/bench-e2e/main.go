// Command bench-e2e runs the whole-system benchmarks of package bench/e2e:
//
//	bench-e2e telemetry    [flags]  detection latency, ingest, memory (make bench-telemetry)
//	bench-e2e convergence  [flags]  agents converging after a plane failure (make bench-convergence)
//
// Results go to docs/benchmarks/ (--out).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/multiplane/multiplane/bench/e2e"
	"github.com/multiplane/multiplane/internal/cliconf"
	"github.com/multiplane/multiplane/internal/logging"
)

func main() {
	if len(os.Args) < 2 || strings.HasPrefix(os.Args[1], "-") {
		fmt.Fprintln(os.Stderr, "usage: bench-e2e telemetry|convergence [flags]  (bench-e2e <cmd> --help lists the flags)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "telemetry":
		err = telemetry(ctx, os.Args[2:])
	case "convergence":
		err = convergence(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown benchmark %q (telemetry or convergence)", os.Args[1])
	}
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-e2e:", err)
		os.Exit(1)
	}
}

// common are the flags every benchmark has.
type common struct {
	logCfg logging.Config
	out    string
}

func (c *common) register(fs *flag.FlagSet, fabricdBin, workDir *string) {
	fs.StringVar(fabricdBin, "fabricd", *fabricdBin, "fabricd binary")
	fs.StringVar(workDir, "work-dir", os.TempDir(), "where fabricd's data directory is made")
	c.out = "docs/benchmarks"
	fs.StringVar(&c.out, "out", c.out, "directory for the report")
	c.logCfg.RegisterFlags(fs)
}

// parse parses args and returns the logger.
func (c *common) parse(fs *flag.FlagSet, args []string) (*slog.Logger, error) {
	if err := cliconf.Parse(fs, args, "BENCH_E2E"); err != nil {
		return nil, err
	}
	return c.logCfg.New(os.Stderr)
}

func telemetry(ctx context.Context, args []string) error {
	cfg := e2e.DefaultTelemetryConfig()
	var cm common
	fs := flag.NewFlagSet("bench-e2e telemetry", flag.ContinueOnError)
	cm.register(fs, &cfg.FabricdBin, &cfg.WorkDir)
	fs.IntVar(&cfg.Switches, "switches", cfg.Switches, "emulated gNMI switches")
	fs.IntVar(&cfg.Ports, "ports", cfg.Ports, "ports per switch")
	fs.IntVar(&cfg.Planes, "planes", cfg.Planes, "planes the switches spread over")
	fs.DurationVar(&cfg.Sample, "sample", cfg.Sample, "gNMI sample interval")
	fs.IntVar(&cfg.Failures, "failures", cfg.Failures, "port failures to inject")
	fs.DurationVar(&cfg.UpHold, "up-hold", cfg.UpHold, "fabricd --health-up-hold")
	fs.DurationVar(&cfg.Ingest, "ingest", cfg.Ingest, "ingest measurement window")
	fs.DurationVar(&cfg.Soak, "soak", cfg.Soak, "memory soak")
	logger, err := cm.parse(fs, args)
	if err != nil {
		return err
	}
	res, err := e2e.RunTelemetry(ctx, cfg, logger)
	if err != nil {
		return err
	}
	return writeReport(cm.out, "telemetry.md", func(w io.Writer) {
		e2e.WriteTelemetryMarkdown(w, res, "bench-e2e telemetry "+strings.Join(args, " "))
	})
}

func convergence(ctx context.Context, args []string) error {
	cfg := e2e.DefaultConvergenceConfig()
	var cm common
	fs := flag.NewFlagSet("bench-e2e convergence", flag.ContinueOnError)
	cm.register(fs, &cfg.FabricdBin, &cfg.WorkDir)
	fs.IntVar(&cfg.Endpoints, "endpoints", cfg.Endpoints, "endpoint agents")
	fs.IntVar(&cfg.Planes, "planes", cfg.Planes, "planes")
	fs.IntVar(&cfg.PerPlane, "switches-per-plane", cfg.PerPlane, "emulated gNMI switches per plane")
	fs.IntVar(&cfg.Clients, "etcd-clients", cfg.Clients, "etcd clients the agents share")
	fs.DurationVar(&cfg.Sample, "sample", cfg.Sample, "gNMI sample interval")
	fs.IntVar(&cfg.DrainCycles, "drain-cycles", cfg.DrainCycles, "drain/undrain cycles (two operations a cycle, one a second)")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "deadline of each convergence")
	fs.DurationVar(&cfg.Settle, "settle", cfg.Settle, "quiet time after the agents' first convergence, before the first event (fabricd's idle CPU is measured over it)")
	fs.StringVar(&cfg.HeapProfile, "heap-profile", "", "write the benchmark process's heap profile (agents, switches, etcd clients) here once the agents converged")
	fs.Func("fabricd-flag", "a fabricd flag after the benchmark's own, as --name=value (repeat it for several), e.g. --fabricd-flag=--log-level=info", func(v string) error {
		if !strings.HasPrefix(v, "-") {
			return fmt.Errorf("%q is not a flag (--name=value)", v)
		}
		cfg.FabricdArgs = append(cfg.FabricdArgs, v)
		return nil
	})
	logger, err := cm.parse(fs, args)
	if err != nil {
		return err
	}
	res, err := e2e.RunConvergence(ctx, cfg, logger)
	if err != nil {
		return err
	}
	name := "convergence.md" // the default fabric; other sizes beside it
	if cfg.Endpoints != e2e.DefaultConvergenceConfig().Endpoints {
		name = fmt.Sprintf("convergence-%d.md", cfg.Endpoints)
	}
	return writeReport(cm.out, name, func(w io.Writer) {
		e2e.WriteConvergenceMarkdown(w, res, "bench-e2e convergence "+strings.Join(args, " "))
	})
}

// writeReport writes a report to out/name and to stdout.
func writeReport(out, name string, write func(io.Writer)) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(out, name))
	if err != nil {
		return err
	}
	write(f)
	write(os.Stdout)
	return f.Close()
}
