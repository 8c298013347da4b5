// Command demo runs a whole Multiplane on one machine without root (see
// package demo); `make demo` builds and runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/multiplane/multiplane/demo"
	"github.com/multiplane/multiplane/internal/cliconf"
	"github.com/multiplane/multiplane/internal/logging"
)

func main() {
	cfg := demo.DefaultConfig()
	logCfg := logging.Config{Level: "warn"}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "fabricd's data directory (private PostgreSQL, embedded etcd, admin.token)")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "fabricd's API address")
	fs.StringVar(&cfg.FabricdBin, "fabricd", cfg.FabricdBin, "fabricd binary to run")
	fs.IntVar(&cfg.Hosts, "hosts", cfg.Hosts, "hosts (even, 2 to 26)")
	fs.IntVar(&cfg.Planes, "planes", cfg.Planes, "planes")
	fs.Int64Var(&cfg.RateBps, "rate", cfg.RateBps, "port rate of every plane, bit/s")
	fs.IntVar(&cfg.Message, "message-size", cfg.Message, "bytes per message")
	fs.DurationVar(&cfg.Report, "report", cfg.Report, "report interval")
	fs.IntVar(&cfg.FailPlane, "fail-plane", cfg.FailPlane, "plane to take down at its switch during the demo (-1: none)")
	fs.DurationVar(&cfg.FailAt, "fail-at", cfg.FailAt, "when to take the plane down")
	fs.DurationVar(&cfg.FailFor, "fail-for", cfg.FailFor, "how long the plane stays down")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "end the demo after this long with a summary (0: run until Ctrl-C)")
	fs.BoolVar(&cfg.Ring, "ring", cfg.Ring, "every host sends to the next in a ring (default: in pairs)")
	logCfg.RegisterFlags(fs)
	if err := cliconf.Parse(fs, os.Args[1:], "DEMO"); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
	logger, err := logCfg.New(os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := demo.Run(ctx, cfg, logger); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}
