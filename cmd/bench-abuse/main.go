// Command bench-abuse runs the abuse benchmark of package bench/abuse
// against the real fabricd (make bench-abuse): it writes a markdown table to
// --out and one line of JSON to stdout. `bench-abuse --help` lists the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/multiplane/multiplane/bench/abuse"
	"github.com/multiplane/multiplane/internal/cliconf"
	"github.com/multiplane/multiplane/internal/logging"
)

const envPrefix = "BENCH_ABUSE"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-abuse:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	cfg := abuse.DefaultConfig()
	var logCfg logging.Config
	fs := flag.NewFlagSet("bench-abuse", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	out := fs.String("out", "docs/benchmarks/abuse.md", "markdown report")
	phases := fs.String("phases", "all", "phases to run, comma-separated: "+strings.Join(abuse.Phases, ",")+" (or all)")
	logCfg.RegisterFlags(fs)
	if err := cliconf.Parse(fs, args, envPrefix); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if err := cfg.ApplyQuick(fs, func(name string) bool {
		_, env := os.LookupEnv(cliconf.EnvName(envPrefix, name))
		return given[name] || env
	}); err != nil {
		return err
	}
	list, err := abuse.ParsePhases(*phases)
	if err != nil {
		return err
	}
	logger, err := logCfg.New(os.Stderr)
	if err != nil {
		return err
	}
	res, err := abuse.Run(ctx, cfg, list, logger)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	abuse.WriteMarkdown(f, res, strings.Join(append([]string{"bench-abuse"}, args...), " "))
	if err := f.Close(); err != nil {
		return err
	}
	return abuse.WriteJSON(os.Stdout, res)
}
