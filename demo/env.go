package demo

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/multiplane/multiplane/agent"
	"github.com/multiplane/multiplane/demo/democtl"
	"github.com/multiplane/multiplane/fabricsim/gnmisim"
	"github.com/multiplane/multiplane/fabricsim/userspace"
	"github.com/multiplane/multiplane/internal/fabricdproc"
	"github.com/multiplane/multiplane/kv"
	"github.com/multiplane/multiplane/planes"
	"github.com/multiplane/multiplane/transport"
)

// Env is a running system: fabric, switches, fabricd, agents and traffic.
// The demo prints it; integration tests break it.
type Env struct {
	Fabric     *userspace.Fabric
	Switches   []*gnmisim.Switch
	Fabricd    *fabricdproc.Proc
	Transports []*transport.Transport
	Agents     []*agent.Agent
	Etcd       *clientv3.Client
	// ControlURL is the fault control fabricd forwards /api/v1/demo to.
	ControlURL string

	cfg          Config
	logger       *slog.Logger
	topologyFile string
	// controlSecretFile holds the control's secret, for fabricd.
	controlSecretFile string
	traffic           *traffic
	ctx               context.Context
	cancel            context.CancelFunc
	wg                sync.WaitGroup
	closers           []func()
}

// Start builds and starts everything; Close stops it.
func Start(ctx context.Context, cfg Config, logger *slog.Logger) (env *Env, err error) {
	if cfg.Hosts < 2 || cfg.Hosts%2 != 0 || cfg.Hosts > 26 || cfg.Planes < 1 {
		return nil, errors.New("demo: hosts must be even, 2 to 26, and planes at least 1")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, err
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	e := &Env{cfg: cfg, logger: logger}
	e.ctx, e.cancel = context.WithCancel(ctx)
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	pcfg := make([]userspace.PlaneConfig, cfg.Planes)
	for i := range pcfg {
		pcfg[i] = userspace.PlaneConfig{RateBps: cfg.RateBps, QueueBytes: 512 << 10, ECNThresholdBytes: 128 << 10}
	}
	if e.Fabric, err = userspace.Start(e.ctx, userspace.Config{Hosts: cfg.Hosts, Port: cfg.FabricPort, Planes: pcfg, Logger: logger.With("component", "fabricsim")}); err != nil {
		return nil, fmt.Errorf("demo: fabric: %w", err)
	}
	e.closers = append(e.closers, func() { e.Fabric.Close() })

	topo := &planes.Topology{}
	for p := 0; p < cfg.Planes; p++ {
		name := fmt.Sprintf("p%d-sw1", p)
		sw, err := gnmisim.Start(gnmisim.Config{Name: name, Source: gnmisim.UserspacePlane(e.Fabric, p), OperPoll: 50 * time.Millisecond,
			Logger: logger.With("component", "gnmisim")})
		if err != nil {
			return nil, fmt.Errorf("demo: switch %s: %w", name, err)
		}
		e.Switches = append(e.Switches, sw)
		e.closers = append(e.closers, func() { sw.Close() })
		topo.Planes = append(topo.Planes, planes.Plane{Name: fmt.Sprintf("p%d", p), Description: "userspace plane"})
		topo.Switches = append(topo.Switches, planes.Switch{Name: name, Plane: fmt.Sprintf("p%d", p),
			GNMI: planes.GNMITarget{Address: sw.Addr(), Insecure: true}})
	}
	for h := 0; h < cfg.Hosts; h++ {
		ep := planes.Endpoint{Name: hostName(h)}
		for p := 0; p < cfg.Planes; p++ {
			ep.Ports = append(ep.Ports, planes.Port{Plane: fmt.Sprintf("p%d", p), Address: e.Fabric.LocalAddr(h, p),
				Switch: fmt.Sprintf("p%d-sw1", p), Interface: fmt.Sprintf("eth%d", h+1), SpeedBps: cfg.RateBps})
		}
		topo.Endpoints = append(topo.Endpoints, ep)
	}
	if err := e.startControl(); err != nil {
		return nil, err
	}
	e.topologyFile = filepath.Join(cfg.DataDir, "demo-topology.json")
	data, _ := json.MarshalIndent(topo, "", "  ")
	if err := os.WriteFile(e.topologyFile, data, 0o644); err != nil {
		return nil, err
	}
	if err := e.StartFabricd(ctx); err != nil {
		return nil, err
	}
	e.closers = append(e.closers, func() {
		if e.Fabricd != nil {
			e.Fabricd.Stop()
		}
	})

	endpoints := cfg.EtcdEndpoints
	if len(endpoints) == 0 {
		if endpoints, err = kv.EmbeddedEndpoints(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	if e.Etcd, err = clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}); err != nil {
		return nil, fmt.Errorf("demo: etcd: %w", err)
	}
	e.closers = append(e.closers, func() { e.Etcd.Close() })
	if cfg.NoHosts {
		return e, nil
	}

	e.Transports = make([]*transport.Transport, cfg.Hosts)
	for h := range e.Transports {
		local := make([]netip.AddrPort, cfg.Planes)
		for p := range local {
			local[p] = e.Fabric.ListenAddr(h, p)
		}
		t, err := transport.Listen(transport.Config{Local: local, Logger: logger.With("component", "transport", "host", hostName(h))})
		if err != nil {
			return nil, fmt.Errorf("demo: transport of %s: %w", hostName(h), err)
		}
		e.Transports[h] = t
		e.closers = append(e.closers, func() { t.Close() })
		var applier agent.Applier = agent.NewTransportApplier(t)
		if cfg.WrapApplier != nil {
			applier = cfg.WrapApplier(hostName(h), applier)
		}
		a, err := agent.New(agent.Config{Endpoint: hostName(h), Client: e.Etcd, StateDir: filepath.Join(cfg.DataDir, "agents"),
			StatusInterval: time.Second},
			applier, logger.With("component", "agent", "endpoint", hostName(h)))
		if err != nil {
			return nil, fmt.Errorf("demo: agent of %s: %w", hostName(h), err)
		}
		e.Agents = append(e.Agents, a)
		e.wg.Go(func() { a.Run(e.ctx) })
	}
	e.traffic = &traffic{cfg: cfg, fab: e.Fabric, hosts: e.Transports, logger: logger}
	for _, f := range cfg.flows() {
		e.wg.Go(func() { e.traffic.receive(e.ctx, f[1]) })
		e.wg.Go(func() { e.traffic.send(e.ctx, f[0], f[1]) })
	}
	return e, nil
}

// startControl serves the fault control (democtl) on loopback, behind a
// secret only this user can read, for fabricd to forward operators'
// requests to.
func (e *Env) startControl() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: control: %w", err)
	}
	secret := rand.Text()
	e.controlSecretFile = filepath.Join(e.cfg.DataDir, "demo-control.secret")
	if err := os.WriteFile(e.controlSecretFile, []byte(secret+"\n"), 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("demo: control: %w", err)
	}
	var planeNames, hostNames []string
	for p := 0; p < e.cfg.Planes; p++ {
		planeNames = append(planeNames, fmt.Sprintf("p%d", p))
	}
	for h := 0; h < e.cfg.Hosts; h++ {
		hostNames = append(hostNames, hostName(h))
	}
	h := democtl.NewHandler(e.Fabric, planeNames, hostNames, secret, func(c democtl.Change) {
		what := "plane " + c.Plane
		if c.Endpoint != "" {
			what = c.Endpoint + "'s port on " + c.Plane
		}
		state := map[string]string{democtl.Fail: "DOWN", democtl.Restore: "back UP"}[c.Action]
		fmt.Fprintf(e.cfg.Out, "%s >>> %s %s (demo control)\n", time.Now().Format("15:04:05"), what, state)
	})
	e.ControlURL = "http://" + ln.Addr().String()
	e.wg.Go(func() {
		if err := democtl.Serve(e.ctx, ln, h); err != nil {
			e.logger.Error("demo control stopped", "err", err)
		}
	})
	return nil
}

// StartFabricd starts fabricd (again, after KillFabricd) on the same data.
func (e *Env) StartFabricd(ctx context.Context) error {
	fd, err := e.start(ctx, e.cfg.Listen, "")
	if err != nil {
		return err
	}
	e.Fabricd = fd
	return nil
}

// StartReplica starts one more fabricd on the same data, PostgreSQL and
// etcd (give both in Config: a replica shares them), on a free port, with
// more flags (--replica-id, say) and its output in fabricd-<name>.log.
// The caller stops it.
func (e *Env) StartReplica(ctx context.Context, name string, args ...string) (*fabricdproc.Proc, error) {
	return e.start(ctx, "", name, args...)
}

func (e *Env) start(ctx context.Context, listen, name string, extra ...string) (*fabricdproc.Proc, error) {
	args := append([]string{"--topology", e.topologyFile, "--demo-control", e.ControlURL,
		"--demo-control-secret-file", e.controlSecretFile}, e.cfg.FabricdArgs...)
	if len(e.cfg.EtcdEndpoints) > 0 {
		args = append(args, "--etcd-endpoints", strings.Join(e.cfg.EtcdEndpoints, ","))
	}
	opts := fabricdproc.Options{Bin: e.cfg.FabricdBin, DataDir: e.cfg.DataDir, Listen: listen, Args: append(args, extra...)}
	if name != "" {
		opts.LogPath = filepath.Join(e.cfg.DataDir, "fabricd-"+name+".log")
	}
	fd, err := fabricdproc.Start(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	return fd, nil
}

// KillFabricd kills fabricd (-9), as a crash would; its private PostgreSQL
// and embedded etcd go with it.
func (e *Env) KillFabricd() { e.Fabricd.Kill() }

// Received is the message bytes host h has received so far.
func (e *Env) Received(h int) uint64 {
	e.traffic.mu.Lock()
	defer e.traffic.mu.Unlock()
	return e.traffic.bytes[h]
}

// PlaneBytes is the bytes plane p has forwarded so far (every port's output).
func (e *Env) PlaneBytes(p int) uint64 {
	var n uint64
	for _, port := range e.Fabric.Stats(p).Ports {
		n += port.Counters.OutOctets
	}
	return n
}

// Close stops everything, in reverse order.
func (e *Env) Close() {
	e.cancel()
	e.wg.Wait()
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	e.closers = nil
}
