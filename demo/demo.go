// Package demo runs a whole Multiplane on one machine, without root: a
// userspace multi-plane fabric, one emulated gNMI switch per plane fed by
// the fabric's own counters, fabricd (the real binary, with its private
// PostgreSQL and embedded etcd), one endpoint agent and transport per host,
// and steady traffic between host pairs. `make demo` runs it.
//
//	err := demo.Run(ctx, demo.DefaultConfig(), logger) // until ctx ends
package demo

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/multiplane/multiplane/fabricsim/userspace"
	"github.com/multiplane/multiplane/internal/fabricdproc"
	"github.com/multiplane/multiplane/transport"
)

// Config sizes the demo.
type Config struct {
	DataDir    string
	Listen     string
	FabricdBin string
	Hosts      int   // even: hosts talk in pairs
	Planes     int   //
	RateBps    int64 // per plane port
	Message    int   // bytes per message
	Report     time.Duration
	// FailPlane is taken down at FailAt for FailFor (-1: never), to show
	// detection, re-steering and recovery.
	FailPlane       int
	FailAt, FailFor time.Duration
	Out             io.Writer // the running report
	// EtcdEndpoints, when set, is an external etcd for fabricd and the
	// agents (default: fabricd's embedded one).
	EtcdEndpoints []string
	// FabricdArgs are more fabricd flags.
	FabricdArgs []string
	// FabricPort is the userspace fabric's UDP port (0: its default).
	FabricPort int
	// NoHosts starts the fabric, switches and fabricd only: no transports,
	// agents or traffic (tests bring their own).
	NoHosts bool
	// Ring sends from every host to the next (the last to the first), so
	// each host sends to one peer and receives from another; the default
	// is pairs, host-a→host-b, host-c→host-d, ...
	Ring bool
}

// flows are the (sender, receiver) host pairs of the traffic.
func (c Config) flows() [][2]int {
	var out [][2]int
	for h := 0; h < c.Hosts; h++ {
		switch {
		case c.Ring:
			out = append(out, [2]int{h, (h + 1) % c.Hosts})
		case h%2 == 0:
			out = append(out, [2]int{h, h + 1})
		}
	}
	return out
}

// DefaultConfig returns the `make demo` settings.
func DefaultConfig() Config {
	return Config{DataDir: "var", Listen: "127.0.0.1:8080", FabricdBin: "bin/fabricd", Hosts: 4, Planes: 4,
		RateBps: 100e6, Message: 256 << 10, Report: 5 * time.Second,
		FailPlane: 1, FailAt: 30 * time.Second, FailFor: 30 * time.Second, Out: os.Stdout}
}

func hostName(h int) string { return fmt.Sprintf("host-%c", 'a'+h) }

// Run runs the demo until ctx ends, then stops everything it started.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	env, err := Start(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer env.Close()
	if cfg.FailPlane >= 0 && cfg.FailPlane < cfg.Planes {
		env.wg.Go(func() { failPlane(env.ctx, cfg, env.Fabric) })
	}
	token := filepath.Join(cfg.DataDir, "admin.token")
	api := env.Fabricd.URL()
	fmt.Fprintf(cfg.Out, `
Multiplane demo: %d hosts, %d planes of %d Mbit/s (userspace fabric), one gNMI switch per plane.
  API        %s/api/v1   (token: %s)
  try        curl -H "Authorization: Bearer $(cat %s)" %s/api/v1/planes
  drain p1   curl -XPOST -H "Authorization: Bearer $(cat %s)" %s/api/v1/drains -d '{"target_kind":"plane","target":"p1","reason":"demo"}'
  logs       %s
Ctrl-C stops everything.

`, cfg.Hosts, cfg.Planes, cfg.RateBps/1e6, api, token, token, api, token, api, env.Fabricd.LogPath)
	env.traffic.report(ctx, env.Fabricd)
	return nil
}

// failPlane takes a plane down at the switch, then brings it back.
func failPlane(ctx context.Context, cfg Config, fab *userspace.Fabric) {
	for _, step := range []struct {
		after time.Duration
		up    bool
	}{{cfg.FailAt, false}, {cfg.FailFor, true}} {
		select {
		case <-ctx.Done():
			return
		case <-time.After(step.after):
		}
		fab.SetUp(cfg.FailPlane, step.up)
		state := "DOWN"
		if step.up {
			state = "back UP"
		}
		fmt.Fprintf(cfg.Out, "%s >>> plane p%d %s at the switch\n", time.Now().Format("15:04:05"), cfg.FailPlane, state)
	}
}

// traffic moves messages between host pairs and reports what it sees.
type traffic struct {
	cfg    Config
	fab    *userspace.Fabric
	hosts  []*transport.Transport
	logger *slog.Logger

	mu    sync.Mutex
	bytes map[int]uint64 // receiving host → message bytes received
}

func (tr *traffic) peer(h int) []netip.AddrPort {
	out := make([]netip.AddrPort, tr.cfg.Planes)
	for p := range out {
		out[p] = tr.fab.PeerAddr(h, p)
	}
	return out
}

func (tr *traffic) send(ctx context.Context, from, to int) {
	msg := make([]byte, tr.cfg.Message)
	rand.Read(msg)
	for ctx.Err() == nil {
		c, err := tr.hosts[from].Dial(ctx, tr.peer(to))
		if err != nil {
			tr.logger.Debug("dial failed; retrying", "from", hostName(from), "err", err)
			time.Sleep(time.Second)
			continue
		}
		for ctx.Err() == nil {
			if err := c.Send(ctx, msg); err != nil {
				tr.logger.Info("connection ended; redialing", "from", hostName(from), "err", err)
				break
			}
		}
		c.Close()
	}
}

func (tr *traffic) receive(ctx context.Context, h int) {
	for ctx.Err() == nil {
		c, err := tr.hosts[h].Accept(ctx)
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			for {
				msg, err := c.Recv(ctx)
				if err != nil {
					return
				}
				tr.mu.Lock()
				if tr.bytes == nil {
					tr.bytes = map[int]uint64{}
				}
				tr.bytes[h] += uint64(len(msg))
				tr.mu.Unlock()
			}
		}()
	}
}

// planeStates reads the plane states from fabricd's API.
func planeStates(ctx context.Context, fd *fabricdproc.Proc) string {
	var body struct {
		Items []struct{ Name, State string }
	}
	if err := fd.GetJSON(ctx, "/api/v1/planes", &body); err != nil {
		return "?"
	}
	var out []string
	for _, p := range body.Items {
		out = append(out, p.Name+"="+p.State)
	}
	return strings.Join(out, " ")
}

// report prints goodput per flow, traffic per plane and plane states.
func (tr *traffic) report(ctx context.Context, fd *fabricdproc.Proc) {
	t := time.NewTicker(tr.cfg.Report)
	defer t.Stop()
	last := map[int]uint64{}
	lastPlane := make([]uint64, tr.cfg.Planes)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tr.mu.Lock()
		line := ""
		for _, f := range tr.cfg.flows() {
			got := tr.bytes[f[1]]
			line += fmt.Sprintf("%s→%s %6.1f Mbit/s  ", hostName(f[0]), hostName(f[1]), float64(got-last[f[1]])*8/tr.cfg.Report.Seconds()/1e6)
			last[f[1]] = got
		}
		tr.mu.Unlock()
		line += "| Mbit/s per plane:"
		for p := 0; p < tr.cfg.Planes; p++ {
			var tx uint64
			for _, port := range tr.fab.Stats(p).Ports {
				tx += port.Counters.OutOctets
			}
			line += fmt.Sprintf(" p%d %5.1f", p, float64(tx-lastPlane[p])*8/tr.cfg.Report.Seconds()/1e6)
			lastPlane[p] = tx
		}
		fmt.Fprintln(tr.cfg.Out, time.Now().Format("15:04:05"), line, "| fabricd:", planeStates(ctx, fd))
	}
}
