// Command gnmisim runs a fleet of emulated gNMI switches (package
// fabricsim/gnmisim) with synthetic traffic, prints the topology that
// describes them (JSON, for fabricd --topology) and serves until
// interrupted.
//
//	gnmisim -switches 8 -ports 16 -planes 4 > topology.json
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/multiplane/multiplane/fabricsim/gnmisim"
	"github.com/multiplane/multiplane/internal/cliconf"
	"github.com/multiplane/multiplane/internal/logging"
)

func main() {
	var cfg gnmisim.FleetConfig
	var logCfg logging.Config
	fs := flag.NewFlagSet("gnmisim", flag.ContinueOnError)
	fs.IntVar(&cfg.Switches, "switches", 4, "number of switches")
	fs.IntVar(&cfg.Ports, "ports", 8, "ports per switch")
	fs.IntVar(&cfg.Planes, "planes", 1, "planes (switches are spread round-robin)")
	fs.StringVar(&cfg.Prefix, "prefix", "sw", "switch name prefix")
	fs.DurationVar(&cfg.Tick, "tick", 0, "counter publishing period (default 1s)")
	fs.BoolVar(&cfg.Burst, "burst", false, "publish as fast as possible")
	fs.Float64Var(&cfg.OctetsPerSec, "octets-per-sec", 1e6, "synthetic traffic per port and direction")
	logCfg.RegisterFlags(fs)
	if err := cliconf.Parse(fs, os.Args[1:], "GNMISIM"); err != nil {
		os.Exit(2)
	}
	logger, err := logCfg.New(os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cfg.Logger = logger
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fleet, err := gnmisim.StartFleet(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer fleet.Close()
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(fleet.Topology()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	<-ctx.Done()
}
