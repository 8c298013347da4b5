// Command fabricd is Multiplane's control plane: it keeps the fabric's
// inventory, intents and history in PostgreSQL, publishes through etcd and
// serves the REST API. `fabricd --help` lists every flag and its
// environment variable.
//
// `fabricd admin-token` mints an admin token locally, from the data
// directory or the database, for an operator who has none left
// (docs/operations.md); `fabricd admin-token --help` lists its flags.
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
	"github.com/multiplane/multiplane/internal/version"
)

const subcommands = `
Commands:
  fabricd admin-token [flags]
    	mint an admin token locally, from the data directory or the database,
    	without the API (recovery when no admin token is left); see
    	fabricd admin-token --help
`

func main() {
	if len(os.Args) > 1 && os.Args[1] == "admin-token" {
		os.Exit(adminToken(os.Args[2:]))
	}
	cfg := daemon.DefaultConfig()
	var logCfg logging.Config
	fs := flag.NewFlagSet("fabricd", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	logCfg.RegisterFlags(fs)
	showVersion := cliconf.Version(fs)
	if err := cliconf.Parse(fs, os.Args[1:], "FABRICD"); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(fs.Output(), subcommands)
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "fabricd:", err)
		os.Exit(2)
	}
	if *showVersion {
		fmt.Println("fabricd", version.Get())
		os.Exit(0)
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

// adminToken runs `fabricd admin-token` and returns the exit status.
func adminToken(args []string) int {
	cfg := daemon.DefaultAdminTokenConfig()
	var logCfg logging.Config
	fs := flag.NewFlagSet("fabricd admin-token", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	logCfg.RegisterFlags(fs)
	if err := cliconf.Parse(fs, args, "FABRICD"); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "fabricd admin-token:", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "fabricd admin-token: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	logger, err := logCfg.New(os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fabricd admin-token:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := daemon.MintAdminToken(ctx, cfg, os.Stdout, logger); err != nil {
		logger.Error("fabricd admin-token failed", "err", err)
		return 1
	}
	return 0
}
