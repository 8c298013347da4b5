// Command fabricsim runs an emulated multi-plane fabric standalone and
// prints each host's addresses per plane, until interrupted (Ctrl-C).
//
// By default the fabric is the userspace relay (package
// fabricsim/userspace, no root needed); --kind netns builds network
// namespaces instead (package fabricsim/netns, root). Every flag has an
// environment twin FABRICSIM_<FLAG>; see --help.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/multiplane/multiplane/fabricsim/netns"
	"github.com/multiplane/multiplane/fabricsim/userspace"
	"github.com/multiplane/multiplane/internal/cliconf"
)

type config struct {
	kind          string
	hosts, planes int
	rate          float64 // Mbit/s per plane
	loss          float64
	reorder       float64
	delay         time.Duration
	ecn           int
	queue         int
	port          int
	mtu           int
	name          string
}

func (c *config) register(fs *flag.FlagSet) {
	fs.StringVar(&c.kind, "kind", "userspace", "fabric: userspace (relay on 127.77/127.78.x.x, no root) or netns (namespaces, root)")
	fs.IntVar(&c.hosts, "hosts", 2, "number of hosts")
	fs.IntVar(&c.planes, "planes", 4, "number of planes")
	fs.Float64Var(&c.rate, "rate", 100, "line rate per plane and port in Mbit/s (0 = unlimited)")
	fs.Float64Var(&c.loss, "loss", 0, "random loss per plane, 0..1 (0.01 = 1%)")
	fs.Float64Var(&c.reorder, "reorder", 0, "userspace: probability a datagram is held back (reordered)")
	fs.DurationVar(&c.delay, "delay", 0, "userspace: one-way delay per plane")
	fs.IntVar(&c.ecn, "ecn-threshold", 0, "userspace: mark ECN CE above this egress backlog in bytes (0 = off)")
	fs.IntVar(&c.queue, "queue", 0, "egress queue limit in bytes (0 = 5 ms of the rate, at least 64 KiB)")
	fs.IntVar(&c.port, "port", userspace.DefaultPort, "userspace: relay port")
	fs.IntVar(&c.mtu, "mtu", 1500, "netns: link MTU")
	fs.StringVar(&c.name, "name", "", "netns: namespace name prefix (default mpfab-<pid>)")
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run starts the fabric, prints its addresses and "ready", and returns
// when ctx ends (Ctrl-C), after tearing the fabric down.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c config
	fs := flag.NewFlagSet("fabricsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.register(fs)
	if err := cliconf.Parse(fs, args, "FABRICSIM"); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		fmt.Fprintln(stderr, "fabricsim:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	bps := int64(c.rate * 1e6)
	switch c.kind {
	case "userspace":
		pcs := make([]userspace.PlaneConfig, c.planes)
		for i := range pcs {
			pcs[i] = userspace.PlaneConfig{RateBps: bps, QueueBytes: c.queue, Loss: c.loss, Reorder: c.reorder,
				Delay: c.delay, ECNThresholdBytes: c.ecn, Seed: int64(i)}
		}
		f, err := userspace.Start(ctx, userspace.Config{Hosts: c.hosts, Port: c.port, Planes: pcs, Logger: log})
		if err != nil {
			fmt.Fprintln(stderr, "fabricsim:", err)
			return 1
		}
		defer f.Close()
		fmt.Fprintf(stdout, "userspace fabric: %d hosts, %d planes, %.0f Mbit/s, loss %g; host binds LOCAL, listens on LOCAL:%d, reaches others at PEER\n",
			c.hosts, c.planes, c.rate, c.loss, f.Port())
		for h := range c.hosts {
			for p := range c.planes {
				fmt.Fprintf(stdout, "host %d plane %d local %v peer %v\n", h, p, f.LocalAddr(h, p), f.PeerAddr(h, p))
			}
		}
	case "netns":
		pcs := make([]netns.PlaneConfig, c.planes)
		for i := range pcs {
			pcs[i] = netns.PlaneConfig{RateBps: bps, QueueBytes: c.queue, Loss: c.loss}
		}
		f, err := netns.Start(ctx, netns.Config{Name: c.name, Hosts: c.hosts, Planes: pcs, MTU: c.mtu, Logger: log})
		if err != nil {
			fmt.Fprintln(stderr, "fabricsim:", err)
			return 1
		}
		defer f.Close()
		fmt.Fprintf(stdout, "netns fabric: %d hosts, %d planes, %.0f Mbit/s, loss %g, MTU %d; run programs with ip netns exec NS\n",
			c.hosts, c.planes, c.rate, c.loss, c.mtu)
		for h := range c.hosts {
			for p := range c.planes {
				fmt.Fprintf(stdout, "host %d plane %d ns %s dev %s addr %v\n", h, p, f.HostNS(h), f.Iface(h, p), f.Addr(h, p))
			}
		}
	default:
		fmt.Fprintf(stderr, "fabricsim: --kind %q: want userspace or netns\n", c.kind)
		return 2
	}
	fmt.Fprintln(stdout, "ready; Ctrl-C to stop")
	<-ctx.Done()
	fmt.Fprintln(stderr, "fabricsim: stopping")
	return 0
}
