package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/multiplane/multiplane/agent"
	"github.com/multiplane/multiplane/bench"
	"github.com/multiplane/multiplane/transport"
)

// registerBenchAgentFlags adds the flags that run the endpoint agent on the
// bench's transport, so a benchmark follows the path sets and rate
// policies fabricd publishes (as `endpoint run` does).
func registerBenchAgentFlags(fs *flag.FlagSet, c *agent.Config) {
	fs.StringVar(&c.Endpoint, "agent-name", "", "multipath/gbn: run the endpoint agent as this endpoint on the bench's transport (needs --agent-etcd-endpoints)")
	fs.Func("agent-etcd-endpoints", "multipath/gbn: etcd client URLs for the agent, comma-separated", func(s string) error {
		c.EtcdEndpoints = strings.Split(s, ",")
		return nil
	})
	fs.StringVar(&c.StateDir, "agent-state-dir", "", "directory of the agent's last-known-good document (empty: none); an enrolled endpoint's state directory runs the agent with its credentials, no etcd flags needed")
}

// withAgent arranges for the agent to run on the bench's transport when
// --agent-etcd-endpoints is given; wait stops it after the run.
func withAgent(ctx context.Context, cfg *bench.Config, acfg agent.Config, stderr io.Writer) (wait func(), err error) {
	id, err := useEnrollment(&acfg)
	if err != nil {
		return nil, err
	}
	if len(acfg.EtcdEndpoints) == 0 {
		return func() {}, nil
	}
	if acfg.Endpoint == "" {
		return nil, errors.New("--agent-etcd-endpoints needs --agent-name")
	}
	if cfg.Mode != bench.ModeMultipath && cfg.Mode != bench.ModeGBN {
		return nil, errors.New("the agent runs with --mode multipath or gbn")
	}
	agentCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if id != nil {
		wg.Go(func() {
			id.RenewLoop(agentCtx, time.Minute, logger)
		})
	}
	cfg.OnTransport = func(t *transport.Transport) {
		a, err := agent.New(acfg, agent.NewTransportApplier(t), logger)
		if err != nil {
			logger.Error("agent not started", "err", err)
			return
		}
		wg.Go(func() { a.Run(agentCtx) })
	}
	return func() { cancel(); wg.Wait() }, nil
}
