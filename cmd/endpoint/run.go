package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/multiplane/multiplane/agent"
	"github.com/multiplane/multiplane/agent/credentials"
	"github.com/multiplane/multiplane/internal/cliconf"
	"github.com/multiplane/multiplane/internal/logging"
	"github.com/multiplane/multiplane/transport"
)

const runUsage = `Usage: endpoint run --bind ADDR,ADDR,... [--state-dir D] [flags]
       endpoint run --name NAME --etcd-endpoints URLS --bind ADDR,ADDR,... [flags]

The endpoint agent: it runs the multipath transport on one local address per
plane (--bind, plane order as in the topology), watches etcd for this
endpoint's path set and rate policy, applies them to the transport, keeps the
last known good one under --state-dir (applied at start, before etcd answers)
and reports its status under a lease. Traffic never waits for etcd.

An endpoint enrolled with endpoint enroll needs no etcd flags: its name, etcd
URLs and certificate are in --state-dir, and the certificate is renewed there
after two thirds of its lifetime.

`

// runAgent is `endpoint run`, until SIGINT or SIGTERM.
func runAgent(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return runAgentContext(ctx, args, stdout, stderr)
}

// runWithContext runs a command line until ctx ends (for tests).
func runWithContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "run" {
		return runAgentContext(ctx, args[1:], stdout, stderr)
	}
	return run(args, stdout, stderr)
}

func runAgentContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var acfg agent.Config
	logCfg := logging.Config{}
	var bind string
	port := 4793
	var mtu int
	var metricsAddr string
	fs := flag.NewFlagSet("endpoint run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	acfg.RegisterFlags(fs)
	logCfg.RegisterFlags(fs)
	fs.StringVar(&bind, "bind", "", "local addresses of the transport, one per plane, comma-separated (IP or IP:port)")
	fs.IntVar(&port, "port", port, "UDP port for --bind addresses given without one")
	fs.IntVar(&mtu, "mtu", 1500, "path MTU: the largest datagram is MTU - 28")
	fs.StringVar(&metricsAddr, "metrics", "", "serve Prometheus metrics on this address (default: off)")
	if err := cliconf.Parse(fs, args, "ENDPOINT"); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, "\n"+runUsage)
			return 0
		}
		fmt.Fprintln(stderr, "endpoint run:", err)
		return 2
	}
	local, err := parseBind(bind, port)
	if err != nil {
		fmt.Fprintln(stderr, "endpoint run:", err)
		return 2
	}
	if mtu < 576 || mtu > 65535 {
		fmt.Fprintln(stderr, "endpoint run: --mtu must be 576 to 65535")
		return 2
	}
	logger, err := logCfg.New(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "endpoint run:", err)
		return 2
	}
	id, err := useEnrollment(&acfg)
	if err != nil {
		fmt.Fprintln(stderr, "endpoint run:", err)
		return 2
	}
	if id != nil {
		logger.Info("enrolled identity", "endpoint", id.Endpoint(), "etcd", id.EtcdEndpoints(), "certificate_expires", id.Expiry(), "renew_at", id.RenewAt())
		go id.RenewLoop(ctx, time.Minute, logger)
	}
	t, err := transport.Listen(transport.Config{Local: local, MaxDatagramSize: transport.ByteCount(mtu - 28), Logger: logger.With("component", "transport")})
	if err != nil {
		fmt.Fprintln(stderr, "endpoint run:", err)
		return 1
	}
	defer t.Close()
	a, err := agent.New(acfg, agent.NewTransportApplier(t), logger)
	if err != nil {
		fmt.Fprintln(stderr, "endpoint run:", err)
		return 2
	}
	if metricsAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(a.Collector())
		ln, err := net.Listen("tcp", metricsAddr)
		if err != nil {
			fmt.Fprintln(stderr, "endpoint run: --metrics:", err)
			return 1
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
		go srv.Serve(ln)
		defer srv.Close()
	}
	logger.Info("endpoint agent running", "endpoint", a.Endpoint(), "planes", len(local))
	if err := a.Run(ctx); err != nil {
		fmt.Fprintln(stderr, "endpoint run:", err)
		return 1
	}
	return 0
}

// useEnrollment fills the etcd settings from the credentials endpoint
// enroll stored in the state directory, unless etcd flags were given.
func useEnrollment(acfg *agent.Config) (*credentials.Identity, error) {
	if len(acfg.EtcdEndpoints) > 0 || acfg.StateDir == "" {
		return nil, nil
	}
	id, err := credentials.Load(acfg.StateDir)
	if errors.Is(err, credentials.ErrNotEnrolled) {
		return nil, nil // agent.New says what is missing
	}
	if err != nil {
		return nil, err
	}
	if acfg.Endpoint != "" && acfg.Endpoint != id.Endpoint() {
		return nil, fmt.Errorf("--name %q, but %s holds the credentials of %q", acfg.Endpoint, acfg.StateDir, id.Endpoint())
	}
	acfg.Endpoint, acfg.EtcdEndpoints, acfg.EtcdTLS, acfg.Redial = id.Endpoint(), id.EtcdEndpoints(), id.TLSConfig(), id.Replaced
	return id, nil
}

// parseBind reads --bind: one IP or IP:port per plane.
func parseBind(s string, port int) ([]netip.AddrPort, error) {
	if s == "" {
		return nil, errors.New("--bind is required: one local address per plane")
	}
	var out []netip.AddrPort
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if ap, err := netip.ParseAddrPort(part); err == nil {
			out = append(out, ap)
			continue
		}
		a, err := netip.ParseAddr(part)
		if err != nil {
			return nil, fmt.Errorf("--bind: %q is not an IP or IP:port", part)
		}
		out = append(out, netip.AddrPortFrom(a, uint16(port)))
	}
	return out, nil
}
