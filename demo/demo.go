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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/multiplane/multiplane/agent"
	"github.com/multiplane/multiplane/fabricsim/gnmisim"
	"github.com/multiplane/multiplane/fabricsim/userspace"
	"github.com/multiplane/multiplane/internal/fabricdproc"
	"github.com/multiplane/multiplane/kv"
	"github.com/multiplane/multiplane/planes"
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
	if cfg.Hosts < 2 || cfg.Hosts%2 != 0 || cfg.Hosts > 26 || cfg.Planes < 1 {
		return errors.New("demo: hosts must be even, 2 to 26, and planes at least 1")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return err
	}
	pcfg := make([]userspace.PlaneConfig, cfg.Planes)
	for i := range pcfg {
		pcfg[i] = userspace.PlaneConfig{RateBps: cfg.RateBps, QueueBytes: 512 << 10, ECNThresholdBytes: 128 << 10}
	}
	fab, err := userspace.Start(ctx, userspace.Config{Hosts: cfg.Hosts, Planes: pcfg, Logger: logger.With("component", "fabricsim")})
	if err != nil {
		return fmt.Errorf("demo: fabric: %w", err)
	}
	defer fab.Close()

	var switches []*gnmisim.Switch
	defer func() {
		for _, s := range switches {
			s.Close()
		}
	}()
	topo := &planes.Topology{}
	for p := 0; p < cfg.Planes; p++ {
		name := fmt.Sprintf("p%d-sw1", p)
		sw, err := gnmisim.Start(gnmisim.Config{Name: name, Source: gnmisim.UserspacePlane(fab, p), Logger: logger.With("component", "gnmisim")})
		if err != nil {
			return fmt.Errorf("demo: switch %s: %w", name, err)
		}
		switches = append(switches, sw)
		topo.Planes = append(topo.Planes, planes.Plane{Name: fmt.Sprintf("p%d", p), Description: "userspace plane"})
		topo.Switches = append(topo.Switches, planes.Switch{Name: name, Plane: fmt.Sprintf("p%d", p),
			GNMI: planes.GNMITarget{Address: sw.Addr(), Insecure: true}})
	}
	for h := 0; h < cfg.Hosts; h++ {
		e := planes.Endpoint{Name: hostName(h)}
		for p := 0; p < cfg.Planes; p++ {
			e.Ports = append(e.Ports, planes.Port{Plane: fmt.Sprintf("p%d", p), Address: fab.LocalAddr(h, p),
				Switch: fmt.Sprintf("p%d-sw1", p), Interface: fmt.Sprintf("eth%d", h+1), SpeedBps: cfg.RateBps})
		}
		topo.Endpoints = append(topo.Endpoints, e)
	}
	topoFile := filepath.Join(cfg.DataDir, "demo-topology.json")
	data, _ := json.MarshalIndent(topo, "", "  ")
	if err := os.WriteFile(topoFile, data, 0o644); err != nil {
		return err
	}

	fd, err := fabricdproc.Start(ctx, fabricdproc.Options{Bin: cfg.FabricdBin, DataDir: cfg.DataDir, Listen: cfg.Listen,
		Args: []string{"--topology", topoFile}})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer fd.Stop()

	endpoints, err := kv.EmbeddedEndpoints(cfg.DataDir)
	if err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("demo: etcd: %w", err)
	}
	defer cli.Close()

	hosts := make([]*transport.Transport, cfg.Hosts)
	var wg sync.WaitGroup
	runCtx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); wg.Wait() }()
	for h := range hosts {
		local := make([]netip.AddrPort, cfg.Planes)
		for p := range local {
			local[p] = fab.ListenAddr(h, p)
		}
		t, err := transport.Listen(transport.Config{Local: local, Logger: logger.With("component", "transport", "host", hostName(h))})
		if err != nil {
			return fmt.Errorf("demo: transport of %s: %w", hostName(h), err)
		}
		defer t.Close()
		hosts[h] = t
		a, err := agent.New(agent.Config{Endpoint: hostName(h), Client: cli, StateDir: filepath.Join(cfg.DataDir, "agents")},
			agent.NewTransportApplier(t), logger.With("component", "agent", "endpoint", hostName(h)))
		if err != nil {
			return fmt.Errorf("demo: agent of %s: %w", hostName(h), err)
		}
		wg.Go(func() { a.Run(runCtx) })
	}

	tr := &traffic{cfg: cfg, fab: fab, hosts: hosts, logger: logger}
	if cfg.FailPlane >= 0 && cfg.FailPlane < cfg.Planes {
		wg.Go(func() { failPlane(runCtx, cfg, fab) })
	}
	for h := 0; h < cfg.Hosts; h += 2 {
		wg.Go(func() { tr.receive(runCtx, h+1) })
		wg.Go(func() { tr.send(runCtx, h, h+1) })
	}
	fmt.Fprintf(cfg.Out, `
Multiplane demo: %d hosts, %d planes of %d Mbit/s (userspace fabric), one gNMI switch per plane.
  API        http://%s/api/v1   (token: %s)
  try        curl -H "Authorization: Bearer $(cat %s)" %s/api/v1/planes
  drain p1   curl -XPOST -H "Authorization: Bearer $(cat %s)" %s/api/v1/drains -d '{"target_kind":"plane","target":"p1","reason":"demo"}'
  logs       %s
Ctrl-C stops everything.

`, cfg.Hosts, cfg.Planes, cfg.RateBps/1e6, cfg.Listen, filepath.Join(cfg.DataDir, "admin.token"),
		filepath.Join(cfg.DataDir, "admin.token"), "http://"+cfg.Listen, filepath.Join(cfg.DataDir, "admin.token"), "http://"+cfg.Listen,
		fd.LogPath)
	tr.report(runCtx, fd)
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

// report prints goodput per pair, traffic per plane and plane states.
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
		for h := 1; h < tr.cfg.Hosts; h += 2 {
			got := tr.bytes[h]
			line += fmt.Sprintf("%s→%s %6.1f Mbit/s  ", hostName(h-1), hostName(h), float64(got-last[h])*8/tr.cfg.Report.Seconds()/1e6)
			last[h] = got
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
