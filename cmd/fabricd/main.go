// Command fabricd is Multiplane's control plane: it keeps the fabric's
// inventory, intents and history in PostgreSQL, publishes through etcd and
// serves the REST API. `fabricd --help` lists every flag and its
// environment variable.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/multiplane/multiplane/daemon"
	"github.com/multiplane/multiplane/internal/cliconf"
	"github.com/multiplane/multiplane/internal/logging"
)

func main() {
	cfg := daemon.DefaultConfig()
	var logCfg logging.Config
	fs := flag.NewFlagSet("fabricd", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	logCfg.RegisterFlags(fs)
	if err := cliconf.Parse(fs, os.Args[1:], "FABRICD"); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "fabricd:", err)
		os.Exit(2)
	}
	logger, err := logCfg.New(os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fabricd:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := daemon.Run(ctx, cfg, logger); err != nil {
		logger.Error("fabricd failed", "err", err)
		stop()
		os.Exit(1)
	}
	logger.Info("fabricd stopped")
}
