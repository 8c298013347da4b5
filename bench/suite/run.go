package suite

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/multiplane/multiplane/bench"
	"github.com/multiplane/multiplane/fabricsim/netns"
	"github.com/multiplane/multiplane/transport"
)

// latencySize is L1's message size.
const latencySize = 64

// S1: 8 KiB messages (a 10 ms bucket holds about 45 of them at the lower
// cap), one connection capped at stepFrom, then at stepTo.
const (
	stepSize          = 8192
	stepFrom, stepTo  = 600e6, 300e6
	stepSeriesWidth   = 10 * time.Millisecond
	stepTolerance     = 1.05
	stepBeforeFrom    = 500 * time.Millisecond
	stepAfterSettling = 50 * time.Millisecond
)

func runScenario(ctx context.Context, cfg *Config, sc Scenario, raw io.Writer) ([]Run, error) {
	planes := make([]netns.PlaneConfig, sc.Planes)
	for i := range planes {
		planes[i] = netns.PlaneConfig{RateBps: sc.RateBps}
	}
	f, err := netns.Start(ctx, netns.Config{Hosts: sc.Hosts(), Planes: planes, MTU: sc.MTU, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := setupMPTCP(ctx, f, cfg.MPTCPPM); err != nil {
		return nil, err
	}
	var runs []Run
	for _, loss := range cfg.lossesOf(sc) {
		for p := range sc.Planes {
			if err := f.SetLoss(ctx, p, loss); err != nil {
				return runs, err
			}
		}
		for _, mode := range cfg.modesOf(sc) {
			for _, poll := range cfg.pollsOf(sc, mode) {
				for i := range cfg.Runs {
					r := Run{Scenario: sc.Name, Planes: sc.Planes, RateBps: sc.RateBps, MTU: sc.MTU, Loss: loss, Mode: mode, Poll: poll,
						Index: i, Time: time.Now().UTC(), LoadAvg: LoadAvg()}
					err := runOnce(ctx, cfg, f, sc, &r)
					if ctx.Err() != nil {
						return runs, ctx.Err()
					}
					if err != nil {
						r.Error = err.Error()
					}
					runs = append(runs, r)
					line, _ := json.Marshal(r)
					_, _ = raw.Write(append(line, '\n'))
					progress(cfg.Progress, sc, &r, err)
					if errors.Is(err, ErrUnavailable) {
						break // the other runs of this mode would say the same
					}
				}
			}
		}
	}
	return runs, nil
}

func progress(w io.Writer, sc Scenario, r *Run, err error) {
	what := string(r.Mode)
	if r.Poll != "" {
		what += "/" + r.Poll
	}
	head := fmt.Sprintf("%-6s loss %4.1f%% %-18s run %d:", sc.Name, r.Loss*100, what, r.Index+1)
	res := r.Result
	switch {
	case err != nil:
		fmt.Fprintf(w, "%s %v\n", head, err)
	case sc.Latency && len(res.Latency) > 0:
		l := res.Latency[0]
		fmt.Fprintf(w, "%s %d B round trip p50 %.1f us, p99 %.1f us, p99.9 %.1f us\n", head, l.Bytes, l.TypicalUs, l.P99Us, l.P999Us)
	default:
		fmt.Fprintf(w, "%s %8.1f Mbit/s (%5.1f%% of line rate), Jain %.3f, %d failed connections, wall %.1f s, switch drops %d of %d packets\n",
			head, res.GoodputBps/1e6, 100*res.GoodputBps/sc.LineRate(), jainOf(sc, res), res.FailedConnections, r.WallSeconds, r.SwitchDrops, r.PacketsSent)
	}
}

// jainOf is the fairness a run is judged by: across senders in incast,
// across connections otherwise.
func jainOf(sc Scenario, res *bench.Result) float64 {
	if sc.Incast() && res.JainClients != nil {
		return *res.JainClients
	}
	return res.JainFairness
}

// setupMPTCP sets the path manager of every host for one subflow per plane.
func setupMPTCP(ctx context.Context, f *netns.Fabric, pm string) error {
	for h := range f.Hosts() {
		if _, err := f.Exec(ctx, h, "ip", "mptcp", "limits", "set", "subflow", "8", "add_addr_accepted", "8"); err != nil {
			return err
		}
	}
	server := f.Hosts() - 1
	for h := range f.Hosts() {
		flag := "subflow"
		switch {
		case pm == "signal" && h == server:
			flag = "signal"
		case pm == "signal" || h == server:
			continue
		}
		for p := 1; p < f.Planes(); p++ {
			if _, err := f.Exec(ctx, h, "ip", "mptcp", "endpoint", "add", f.Addr(h, p).String(), "dev", f.Iface(h, p), flag); err != nil {
				return err
			}
		}
	}
	return nil
}

func addrs(f *netns.Fabric, h int) string {
	var s []string
	for p := range f.Planes() {
		s = append(s, f.Addr(h, p).String())
	}
	return strings.Join(s, ",")
}

// counters is what the fabric counted so far: packets the clients sent and
// the shapers dropped.
func counters(ctx context.Context, f *netns.Fabric, clients int) (sent, drops uint64, err error) {
	for p := range f.Planes() {
		for h := range f.Hosts() {
			sh, err := f.Shaper(ctx, h, p)
			if err != nil {
				return 0, 0, err
			}
			drops += sh.Drops
			if h < clients {
				lc, err := f.Counters(ctx, h, p)
				if err != nil {
					return 0, 0, err
				}
				sent += lc.TxPackets
			}
		}
	}
	return sent, drops, nil
}

// startDelay is how long after launching the clients of a multi-sender
// run they start together (--start-at): enough for the processes to start
// and dial conns connections in all (500 per sender of 8 took 2.3 s on 2
// cores); a client that is later starts at once and says so.
func startDelay(conns int) time.Duration {
	return time.Second + time.Duration(conns)*500*time.Microsecond
}

// runOnce runs one server on the last host and one client on each sender
// host, all at once, and fills r: the client's result, or with several
// clients the server's (it saw every client).
func runOnce(ctx context.Context, cfg *Config, f *netns.Fabric, sc Scenario, r *Run) error {
	senders, server := max(1, sc.Senders), f.Hosts()-1
	port := "18515"
	common := []string{"--mode", string(r.Mode), "--port", port, "--interval", "0", "--mtu", strconv.Itoa(f.MTU())}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration+90*time.Second)
	defer cancel()
	if poll := cmp.Or(r.Poll, cfg.Poll); poll != "" && (r.Mode == bench.ModeMultipath || r.Mode == bench.ModeGBN) {
		common = append(common, "--poll", poll)
	}
	srvArgs := []string{"bench", "server", "--bind", addrs(f, server), "--clients", strconv.Itoa(senders),
		"--timeout", (cfg.Duration + 60*time.Second).String(), "--json"}
	if sc.RateStep {
		srvArgs = append(srvArgs, "--series", stepSeriesWidth.String())
	}
	if sc.Grant && (r.Mode == bench.ModeMultipath || r.Mode == bench.ModeGBN) {
		srvArgs = append(srvArgs, "--ingress-budget", fmt.Sprintf("%.0f", sc.IngressBudget()))
	}
	profile := func(role string) []string {
		if cfg.ProfileDir == "" || (r.Mode != bench.ModeMultipath && r.Mode != bench.ModeGBN) {
			return nil
		}
		name := fmt.Sprintf("%s-%s-loss%g-run%d-%s.pprof", r.Scenario, r.Mode, r.Loss, r.Index, role)
		return []string{"--cpuprofile", filepath.Join(cfg.ProfileDir, name)}
	}
	srvArgs = append(srvArgs, profile("server")...)
	srv := f.Command(ctx, server, cfg.Endpoint, append(srvArgs, common...)...)
	var sout, serr bytes.Buffer
	srv.Stdout, srv.Stderr = &sout, &serr
	if sc.Latency {
		// One message in flight: each bench process runs to completion on
		// one core (as a poll-mode driver's does), so a busy poller never
		// competes with its own process for the CPUs.
		srv.Env = append(os.Environ(), "GOMAXPROCS=1")
	}
	if err := srv.Start(); err != nil {
		return err
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	kill := func() {
		_ = srv.Process.Kill()
		<-srvDone
	}
	sent0, drops0, err := counters(ctx, f, senders)
	if err != nil {
		kill()
		return err
	}
	args := []string{"-s", strconv.Itoa(cfg.Size), "-D", cfg.Duration.String(), "-q", strconv.Itoa(cmp.Or(sc.Conns, cfg.Conns))}
	switch {
	case sc.Latency:
		args = []string{"--lat", "-s", strconv.Itoa(latencySize), "-D", cfg.Duration.String()}
	case sc.RateStep:
		args = []string{"-s", strconv.Itoa(stepSize), "-D", cfg.Duration.String(), "-q", "1",
			"--egress-cap", fmt.Sprintf("%.0f", stepFrom), "--egress-cap-at", fmt.Sprintf("%v:%.0f", cfg.Duration/2, stepTo),
			"--series", stepSeriesWidth.String()}
	}
	type client struct {
		cmd      *exec.Cmd
		out, err bytes.Buffer
	}
	clients := make([]*client, senders)
	start := time.Now()
	if senders > 1 {
		// The clients start their runs together once connected, so the
		// server's aggregate covers time when all of them send, not their
		// staggered starts and ends (≈ 0.2 s of 8 in I1-1 otherwise).
		at := start.Add(startDelay(cmp.Or(sc.Conns, cfg.Conns) * senders))
		args = append(args, "--start-at", strconv.FormatFloat(float64(at.UnixNano())/1e9, 'f', 3, 64))
	}
	for h := range senders {
		c := &client{cmd: f.Command(ctx, h, cfg.Endpoint, append(append([]string{"bench", "client", "--bind", addrs(f, h), "--peer", addrs(f, server),
			"--json"}, append(args, profile(fmt.Sprintf("client%d", h))...)...), common...)...)}
		c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.err
		c.cmd.Env = srv.Env
		if err := c.cmd.Start(); err != nil {
			kill()
			return err
		}
		clients[h] = c
	}
	var clientErr error
	for h, c := range clients {
		if err := c.cmd.Wait(); err != nil && clientErr == nil {
			msg := strings.TrimSpace(c.err.String())
			if strings.Contains(msg, "not available yet") {
				clientErr = fmt.Errorf("%w: %s", ErrUnavailable, lastLine(msg))
			} else {
				clientErr = fmt.Errorf("suite: client on host %d: %v: %s", h, err, lastLine(msg))
			}
		}
	}
	r.WallSeconds = time.Since(start).Seconds()
	if clientErr != nil {
		kill()
		return fmt.Errorf("%w (server: %s)", clientErr, lastLine(serr.String()))
	}
	select {
	case err := <-srvDone:
		if err != nil {
			return fmt.Errorf("suite: server: %v: %s", err, lastLine(serr.String()))
		}
	case <-time.After(30 * time.Second):
		kill()
		return errors.New("suite: server did not exit after the run")
	}
	sent1, drops1, err := counters(ctx, f, senders)
	if err != nil {
		return err
	}
	r.PacketsSent, r.SwitchDrops = sent1-sent0, drops1-drops0
	out := clients[0].out.String()
	if sc.Incast() {
		out = sout.String()
	}
	var res bench.Result
	if err := json.Unmarshal([]byte(lastLine(out)), &res); err != nil {
		return fmt.Errorf("suite: bench output: %w", err)
	}
	r.Result = &res
	if sc.Incast() {
		for h, c := range clients {
			var cres bench.Result
			if err := json.Unmarshal([]byte(lastLine(c.out.String())), &cres); err != nil {
				return fmt.Errorf("suite: bench output of client %d: %w", h, err)
			}
			r.ClientIO = append(r.ClientIO, cres.IO)
		}
	}
	if sc.RateStep {
		var sres bench.Result
		if err := json.Unmarshal([]byte(lastLine(sout.String())), &sres); err != nil {
			return fmt.Errorf("suite: bench server output: %w", err)
		}
		step, err := stepFigure(&res, &sres, cfg.Duration)
		if err != nil {
			return err
		}
		r.Step = step
	}
	return nil
}

// stepFigure reads S1's figure from the client's rate changes and egress
// series and the server's series.
func stepFigure(cli, srv *bench.Result, d time.Duration) (*StepFigure, error) {
	s := srv.Series
	if s == nil || len(cli.RateChanges) != 2 {
		return nil, fmt.Errorf("suite: S1: server series %v, client rate changes %d (want 2)", s != nil, len(cli.RateChanges))
	}
	at := cli.RateChanges[1].AtUnixNs
	end := s.StartUnixNs + int64(d)
	fg := &StepFigure{SettleMs: -1, CapBefore: stepFrom, CapAfter: stepTo,
		GoodBefore: s.Mean(s.StartUnixNs+int64(stepBeforeFrom), at), GoodAfter: s.Mean(at+int64(stepAfterSettling), end)}
	if settle, ok := s.Settle(at, end, stepTolerance*stepTo, transport.PacingBurst); ok {
		fg.SettleMs = float64(settle) / 1e6
	}
	fg.EgressSettleMs = -1
	if eg := cli.EgressSeries; eg != nil {
		if settle, ok := eg.Settle(at, eg.StartUnixNs+int64(d), stepTolerance*stepTo, transport.PacingBurst); ok {
			fg.EgressSettleMs = float64(settle) / 1e6
		}
	}
	return fg, nil
}

func lastLine(s string) string {
	var last string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if t := strings.TrimSpace(sc.Text()); t != "" {
			last = t
		}
	}
	return last
}
