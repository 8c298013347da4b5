package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func lo(n int) []netip.Addr {
	a := make([]netip.Addr, n)
	for i := range a {
		a[i] = netip.MustParseAddr("127.0.0.1")
	}
	return a
}

// pair runs a server and a client in-process over tr and returns both
// results and errors.
func pair(t *testing.T, tr Transport, cfg Config) (srv, cli Result, out string, serr, cerr error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testenv.Context(t), 60*time.Second)
	defer cancel()
	cfg.Port = freePort(t)
	cfg.Interval = 100 * time.Millisecond
	scfg := cfg
	scfg.Role, scfg.Clients = RoleServer, 1
	ccfg := cfg
	ccfg.Role = RoleClient
	type res struct {
		r   Result
		err error
	}
	done := make(chan res, 1)
	var sout bytes.Buffer
	go func() {
		r, err := runServer(ctx, &scfg, tr, &bytes.Buffer{})
		done <- res{r, err}
	}()
	var stderr bytes.Buffer
	if ccfg.Latency {
		cli, cerr = runLatency(ctx, &ccfg, tr, &stderr)
	} else {
		cli, cerr = runClient(ctx, &ccfg, tr, &stderr)
	}
	s := <-done
	var stdout bytes.Buffer
	if err := WriteReport(&stdout, &ccfg, cli); err != nil {
		t.Fatal(err)
	}
	_ = sout
	return s.r, cli, stdout.String() + stderr.String(), s.err, cerr
}

func TestTCPRunVerifiesEveryMessage(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"iterations", Config{Mode: ModeTCP, Size: 4096, Iterations: 500, Conns: 1}},
		{"duration-q3", Config{Mode: ModeTCP, Size: 65536, Duration: 300 * time.Millisecond, Conns: 3, JSON: true, ReportGbits: true}},
		{"mptcp", Config{Mode: ModeMPTCP, Size: 1500, Iterations: 200, Conns: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Bind, cfg.Peer = lo(2), lo(2)
			cfg.ConnectTimeout = 5 * time.Second
			tr, err := transportFor(cfg.Mode)
			if err != nil {
				t.Fatal(err)
			}
			srv, cli, out, serr, cerr := pair(t, tr, cfg)
			if serr != nil || cerr != nil {
				t.Fatalf("server %v, client %v\n%s", serr, cerr, out)
			}
			if cfg.Iterations > 0 && cfg.Duration == 0 && cli.Messages != int64(cfg.Iterations*cfg.Conns) {
				t.Fatalf("client verified %d messages, want %d", cli.Messages, cfg.Iterations*cfg.Conns)
			}
			if srv.Messages != cli.Messages || srv.Bytes != cli.Bytes || cli.Bytes != cli.Messages*int64(cfg.Size) || cli.GoodputBps <= 0 {
				t.Fatalf("server %+v client %+v", srv, cli)
			}
			if !strings.Contains(out, "#bytes") || !strings.Contains(out, "MsgRate[Mpps]") {
				t.Fatalf("no perftest table:\n%s", out)
			}
			if cfg.JSON {
				lines := strings.Split(strings.TrimSpace(out[:strings.LastIndex(out, "}")+1]), "\n")
				var j map[string]any
				if err := json.Unmarshal([]byte(lines[len(lines)-1]), &j); err != nil {
					t.Fatalf("last line not JSON: %v\n%s", err, out)
				}
				for _, k := range []string{"goodput_bps", "bytes", "seconds", "messages", "retransmits", "connections", "per_plane_bytes", "mode",
					"failed_connections", "per_connection_bytes", "jain_fairness"} {
					if _, ok := j[k]; !ok {
						t.Errorf("JSON lacks %q", k)
					}
				}
				pc, _ := j["per_connection_bytes"].([]any)
				var sum float64
				for _, v := range pc {
					sum += v.(float64)
				}
				if len(pc) != cfg.Conns || sum != j["bytes"] || j["failed_connections"] != 0.0 || j["jain_fairness"].(float64) <= 0 {
					t.Errorf("JSON per_connection_bytes %v (sum %v, bytes %v), failed_connections %v, jain_fairness %v",
						pc, sum, j["bytes"], j["failed_connections"], j["jain_fairness"])
				}
			}
		})
	}
}

// corrupting flips one payload byte of the 10th message sent.
type corrupting struct {
	Transport
	n atomic.Int64
}

func (c *corrupting) Dial(ctx context.Context, cfg *Config) (Conn, error) {
	conn, err := c.Transport.Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &corruptConn{Conn: conn, t: c}, nil
}

type corruptConn struct {
	Conn
	t *corrupting
}

func (c *corruptConn) Send(ctx context.Context, msg []byte) error {
	if c.t.n.Add(1) == 10 {
		msg = append([]byte(nil), msg...)
		msg[len(msg)-1] ^= 1
	}
	return c.Conn.Send(ctx, msg)
}

func TestCorruptMessageFailsBothSides(t *testing.T) {
	cfg := Config{Mode: ModeTCP, Size: 2048, Iterations: 50, Conns: 1, Bind: lo(1), Peer: lo(1), ConnectTimeout: 5 * time.Second}
	_, cli, _, serr, cerr := pair(t, &corrupting{Transport: &tcpTransport{}}, cfg)
	if !errors.Is(serr, ErrVerify) || !errors.Is(cerr, ErrVerify) {
		t.Fatalf("server %v, client %v", serr, cerr)
	}
	if cli.Errors < 1 || cli.Messages != 49 {
		t.Fatalf("client result %+v", cli)
	}
}

// failing makes connection 1 of a run fail after 20 messages.
type failing struct{ Transport }

var errInjected = errors.New("injected failure")

func (f *failing) Dial(ctx context.Context, cfg *Config) (Conn, error) {
	conn, err := f.Transport.Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &failConn{Conn: conn}, nil
}

type failConn struct {
	Conn
	sent int
}

func (c *failConn) Send(ctx context.Context, msg []byte) error {
	if h, _ := parseHeader(msg); h.conn == 1 && h.kind == kindData {
		if c.sent++; c.sent > 20 {
			return errInjected
		}
	}
	return c.Conn.Send(ctx, msg)
}

// TestFailedConnectionIsCountedOthersRun: a connection that fails ends
// alone; the others finish, and both sides count the failure.
func TestFailedConnectionIsCountedOthersRun(t *testing.T) {
	cfg := Config{Mode: ModeTCP, Size: 1024, Iterations: 200, Conns: 3, Bind: lo(1), Peer: lo(1), ConnectTimeout: 5 * time.Second, JSON: true}
	srv, cli, out, serr, cerr := pair(t, &failing{Transport: &tcpTransport{}}, cfg)
	if !errors.Is(cerr, ErrConnFailed) || !errors.Is(cerr, errInjected) || !errors.Is(serr, ErrConnFailed) {
		t.Fatalf("server %v, client %v", serr, cerr)
	}
	if cli.FailedConnections != 1 || len(cli.PerConnectionBytes) != 3 || cli.PerConnectionBytes[1] != 0 ||
		cli.PerConnectionBytes[0] != 200*1024 || cli.PerConnectionBytes[2] != 200*1024 || cli.Messages != 400 {
		t.Fatalf("client %+v", cli)
	}
	if want := Jain([]float64{1, 0, 1}); cli.JainFairness != want {
		t.Fatalf("client Jain %v, want %v", cli.JainFairness, want)
	}
	// The failed connection's 20 messages count when they arrived: the
	// client's close can reset it (unread data in its socket) before the
	// server read them, and the kernel then drops them. Never more.
	if got := srv.PerConnectionBytes[1]; srv.FailedConnections != 1 || len(srv.Clients) != 1 || srv.Clients[0].FailedConnections != 1 ||
		!srv.Clients[0].Complete || got > 20*1024 || got%1024 != 0 {
		t.Fatalf("server %+v", srv)
	}
	if !strings.Contains(out, "1 failed of 3") {
		t.Fatalf("report:\n%s", out)
	}
}

func TestTransportForEveryMode(t *testing.T) {
	for _, m := range Modes {
		if _, err := transportFor(m); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
	}
	if _, err := transportFor("bogus"); !errors.Is(err, ErrUsage) {
		t.Fatalf("bogus mode: %v", err)
	}
}

func TestValidate(t *testing.T) {
	good := Config{Role: RoleClient, Mode: ModeTCP, Bind: lo(2), Peer: lo(2), Port: 1, Size: 100, Iterations: 1, Conns: 1}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	most := good
	most.Conns = 8192
	if err := most.Validate(); err != nil {
		t.Fatalf("-q 8192: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"role":      func(c *Config) { c.Role = "x" },
		"mode":      func(c *Config) { c.Mode = "x" },
		"nopeer":    func(c *Config) { c.Peer = nil },
		"mismatch":  func(c *Config) { c.Peer = lo(3) },
		"size":      func(c *Config) { c.Size = 10 },
		"conns":     func(c *Config) { c.Conns = 0 },
		"conns-max": func(c *Config) { c.Conns = MaxConns + 1 },
		"clients":   func(c *Config) { c.Clients = -1 },
		"iters":     func(c *Config) { c.Iterations = 0 },
	} {
		c := good
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrUsage) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestServerServesConcurrentClients runs one server and three clients at
// once (1, 2 and 3 connections): the server serves every client to the end
// and reports each, by address, and the aggregate.
func TestServerServesConcurrentClients(t *testing.T) {
	for _, tc := range []struct {
		name    string
		clients int           // server --clients
		dur     time.Duration // server -D
	}{
		{"clients-limit", 3, 0},
		{"duration-window", 0, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(testenv.Context(t), 60*time.Second)
			defer cancel()
			base := Config{Mode: ModeTCP, Bind: lo(1), Peer: lo(1), Port: freePort(t), Size: 4096, Conns: 1,
				ConnectTimeout: 5 * time.Second, JSON: true}
			scfg := base
			scfg.Role, scfg.Clients, scfg.Duration, scfg.Iterations = RoleServer, tc.clients, tc.dur, 1
			type res struct {
				r   Result
				err error
			}
			srvDone := make(chan res, 1)
			var sout, serr bytes.Buffer
			go func() {
				r, err := Run(ctx, scfg, &sout, &serr)
				srvDone <- res{r, err}
			}()
			cliDone := make(chan res, 3)
			for q := 1; q <= 3; q++ {
				go func() {
					ccfg := base
					ccfg.Role, ccfg.Conns, ccfg.Iterations, ccfg.Duration = RoleClient, q, 300*q, 0
					r, err := Run(ctx, ccfg, &bytes.Buffer{}, &bytes.Buffer{})
					cliDone <- res{r, err}
				}()
			}
			byConns := map[int]Result{}
			for range 3 {
				c := <-cliDone
				if c.err != nil {
					t.Fatalf("client: %v", c.err)
				}
				byConns[c.r.Connections] = c.r
			}
			s := <-srvDone
			if s.err != nil {
				t.Fatalf("server: %v\n%s", s.err, serr.String())
			}
			if len(s.r.Clients) != 3 {
				t.Fatalf("server reported %d clients, want 3: %+v\n%s", len(s.r.Clients), s.r.Clients, serr.String())
			}
			var sum int64
			for _, cr := range s.r.Clients {
				cli, ok := byConns[cr.Connections]
				if !ok || !cr.Complete || cr.FailedConnections != 0 || cr.Bytes != cli.Bytes || cr.Messages != cli.Messages ||
					!strings.HasPrefix(cr.Addr, "127.0.0.1:") || cr.GoodputBps <= 0 {
					t.Errorf("client %+v, its own result %+v", cr, cli)
				}
				sum += cr.Bytes
			}
			if s.r.Bytes != sum || s.r.Connections != 6 || len(s.r.PerConnectionBytes) != 6 || s.r.FailedConnections != 0 || s.r.JainClients == nil {
				t.Fatalf("aggregate %+v", s.r)
			}
			// The report names every client.
			out := sout.String()
			for _, cr := range s.r.Clients {
				if !strings.Contains(out, cr.Addr) {
					t.Errorf("report lacks client %s:\n%s", cr.Addr, out)
				}
			}
		})
	}
}

// wrapping wraps every connection a transport dials or accepts.
type wrapping struct {
	Transport
	wrap func(c Conn, server bool) Conn
}

func (w wrapping) Dial(ctx context.Context, cfg *Config) (Conn, error) {
	c, err := w.Transport.Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return w.wrap(c, false), nil
}

func (w wrapping) Listen(ctx context.Context, cfg *Config) (Listener, error) {
	ln, err := w.Transport.Listen(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return wrappingListener{ln, w.wrap}, nil
}

type wrappingListener struct {
	Listener
	wrap func(c Conn, server bool) Conn
}

func (l wrappingListener) Accept(ctx context.Context) (Conn, error) {
	c, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return l.wrap(c, true), nil
}

// gated holds the server's receiving until gate is closed, and counts the
// data messages the client hands to Send.
type gated struct {
	gate chan struct{}
	sent atomic.Int64
}

func (g *gated) transport(tr Transport) Transport {
	return wrapping{tr, func(c Conn, server bool) Conn { return &gatedConn{Conn: c, g: g, server: server} }}
}

type gatedConn struct {
	Conn
	g      *gated
	server bool
}

func (c *gatedConn) Recv(ctx context.Context, buf []byte) ([]byte, error) {
	if c.server {
		select {
		case <-c.g.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return c.Conn.Recv(ctx, buf)
}

func (c *gatedConn) Send(ctx context.Context, msg []byte) error {
	err := c.Conn.Send(ctx, msg)
	if h, _ := parseHeader(msg); err == nil && h.kind == kindData {
		c.g.sent.Add(1)
	}
	return err
}

// TestClientProgressCountsVerifiedBytes: while the server verifies
// nothing, the client's progress lines say 0 bytes, however much it has
// handed to Send; then they follow what the server verified.
func TestClientProgressCountsVerifiedBytes(t *testing.T) {
	ctx, cancel := context.WithTimeout(testenv.Context(t), 60*time.Second)
	defer cancel()
	const n, size = 100, 4096 // 400 KB: fits the loopback socket buffers
	g := &gated{gate: make(chan struct{})}
	tr := g.transport(&tcpTransport{})
	cfg := Config{Mode: ModeTCP, Bind: lo(1), Peer: lo(1), Port: freePort(t), Size: size, Iterations: n, Conns: 1,
		ConnectTimeout: 5 * time.Second, Interval: 5 * time.Millisecond}
	scfg, ccfg := cfg, cfg
	scfg.Role, scfg.Clients, scfg.Interval = RoleServer, 1, 0
	ccfg.Role = RoleClient
	srvDone := make(chan error, 1)
	go func() {
		_, err := runServer(ctx, &scfg, tr, &bytes.Buffer{})
		srvDone <- err
	}()
	var stderr testutil.SyncBuffer
	cliDone := make(chan error, 1)
	var cli Result
	go func() {
		var err error
		cli, err = runClient(ctx, &ccfg, tr, &stderr)
		cliDone <- err
	}()
	lines := func() []string {
		var out []string
		for l := range strings.Lines(stderr.String()) {
			if strings.Contains(l, " total ") {
				out = append(out, l)
			}
		}
		return out
	}
	testutil.WaitFor(t, 10*time.Second, "every message handed to Send", func() bool { return g.sent.Load() == n })
	after := len(lines())
	testutil.WaitFor(t, 10*time.Second, "two more progress lines", func() bool { return len(lines()) >= after+2 })
	for _, l := range lines() {
		if !strings.HasSuffix(strings.TrimSpace(l), "total 0 bytes") {
			t.Fatalf("progress counts bytes the server has not verified: %q", l)
		}
	}
	close(g.gate)
	if err := <-cliDone; err != nil {
		t.Fatal(err)
	}
	if err := <-srvDone; err != nil {
		t.Fatal(err)
	}
	if cli.Bytes != n*size {
		t.Fatalf("verified %d bytes, want %d", cli.Bytes, n*size)
	}
}

// TestLatencyPingPong runs --lat over TCP on loopback: every size gets
// its round trips, the statistics are ordered, and the server verified
// every ping.
func TestLatencyPingPong(t *testing.T) {
	const iters = 50
	cfg := Config{Mode: ModeTCP, Latency: true, Sizes: []int{64, 1024}, Size: 1024, Iterations: iters, Conns: 1,
		Bind: lo(1), Peer: lo(1), ConnectTimeout: 5 * time.Second, JSON: true}
	srv, cli, out, serr, cerr := pair(t, &tcpTransport{}, cfg)
	if serr != nil || cerr != nil {
		t.Fatalf("server %v, client %v\n%s", serr, cerr, out)
	}
	if len(cli.Latency) != 2 {
		t.Fatalf("latency %+v", cli.Latency)
	}
	for i, l := range cli.Latency {
		if l.Bytes != cfg.Sizes[i] || l.Iterations != iters || l.MinUs <= 0 ||
			!(l.MinUs <= l.TypicalUs && l.TypicalUs <= l.P99Us && l.P99Us <= l.P999Us && l.P999Us <= l.MaxUs) ||
			l.AvgUs < l.MinUs || l.AvgUs > l.MaxUs {
			t.Errorf("size %d: %+v", cfg.Sizes[i], l)
		}
	}
	pings := int64(2 * (iters + warmup))
	if cli.Messages != pings || srv.Messages != pings || cli.Bytes != (iters+warmup)*(64+1024) || srv.Bytes != cli.Bytes {
		t.Fatalf("client %d messages %d bytes, server %d messages %d bytes, want %d messages", cli.Messages, cli.Bytes, srv.Messages, srv.Bytes, pings)
	}
	for _, col := range []string{"#bytes", "#iterations", "t_min[usec]", "t_max[usec]", "t_typical[usec]", "t_avg[usec]",
		"t_stdev[usec]", "99% percentile[usec]", "99.9% percentile[usec]"} {
		if !strings.Contains(out, col) {
			t.Errorf("table lacks %q:\n%s", col, out)
		}
	}
	var j struct {
		Latency []map[string]any `json:"latency"`
	}
	last := strings.TrimSpace(out[:strings.LastIndex(out, "}")+1])
	if err := json.Unmarshal([]byte(last[strings.LastIndex(last, "\n")+1:]), &j); err != nil || len(j.Latency) != 2 {
		t.Fatalf("JSON %v: %+v\n%s", err, j, out)
	}
	for _, k := range []string{"bytes", "iterations", "t_min_us", "t_max_us", "t_typical_us", "t_avg_us", "t_stdev_us", "p99_us", "p99_9_us"} {
		if _, ok := j.Latency[0][k]; !ok {
			t.Errorf("JSON latency lacks %q", k)
		}
	}
}

func TestLatencySizes(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want []int
	}{
		{Config{Size: 1024, AllSizes: true}, []int{64, 128, 256, 512, 1024}},
		{Config{Size: 1000, AllSizes: true}, []int{64, 128, 256, 512}},
		{Config{Size: 4096, Sizes: []int{64, 4096}}, []int{64, 4096}},
		{Config{Size: 512}, []int{512}},
	} {
		if got := tc.cfg.latencySizes(); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.cfg, got, tc.want)
		}
	}
	var c Config
	if err := (*sizeList)(&c).Set("64, 4096,1024"); err != nil || c.Size != 4096 || !slices.Equal(c.Sizes, []int{64, 4096, 1024}) {
		t.Fatalf("-s list: %v %+v", err, c)
	}
	if err := (*sizeList)(&c).Set("16"); err == nil {
		t.Fatal("-s 16 accepted")
	}
}

func TestCPUProfileWritten(t *testing.T) {
	cfg := Config{Mode: ModeTCP, Role: RoleClient, Size: 4096, Iterations: 1, Conns: 1,
		Bind: lo(1), Peer: lo(1), Port: freePort(t), ConnectTimeout: 200 * time.Millisecond}
	cfg.CPUProfile = filepath.Join(t.TempDir(), "cpu.prof")
	if _, err := Run(testenv.Context(t), cfg, io.Discard, io.Discard); err == nil {
		t.Fatal("client with no server: want a dial error")
	}
	b, err := os.ReadFile(cfg.CPUProfile)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile %q: %d bytes, %v: want a gzipped pprof profile", cfg.CPUProfile, len(b), err)
	}
	cfg.CPUProfile = filepath.Join(t.TempDir(), "missing", "cpu.prof")
	if _, err := Run(testenv.Context(t), cfg, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "--cpuprofile") {
		t.Fatalf("unwritable --cpuprofile: got %v, want an error naming the flag", err)
	}
}

// --start-at: the run starts at the time given once connected (the wait is
// not part of the run's seconds); a client connected after it starts at
// once and says so; only clients take it, and not far ahead.
func TestStartAt(t *testing.T) {
	var st startTime
	for v, want := range map[string]time.Time{
		"1733338000.5":         time.Unix(1733338000, 5e8),
		"2026-12-04T21:30:00Z": time.Date(2026, 12, 4, 21, 30, 0, 0, time.UTC),
	} {
		if err := st.Set(v); err != nil || !time.Time(st).Equal(want) {
			t.Errorf("--start-at %s: %v, %v; want %v", v, time.Time(st), err, want)
		}
	}
	for _, v := range []string{"soon", "-5", "0", "2026-12-04 21:30"} {
		if err := st.Set(v); err == nil {
			t.Errorf("--start-at %q accepted", v)
		}
	}
	good := Config{Role: RoleClient, Mode: ModeTCP, Bind: lo(1), Peer: lo(1), Port: 1, Size: 100, Iterations: 1, Conns: 1,
		StartAt: time.Now().Add(time.Minute)}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"server":    func(c *Config) { c.Role = RoleServer },
		"far ahead": func(c *Config) { c.StartAt = time.Now().Add(2 * time.Hour) },
	} {
		c := good
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrUsage) {
			t.Errorf("%s: %v", name, err)
		}
	}

	wait := 700 * time.Millisecond
	cfg := Config{Mode: ModeTCP, Bind: lo(1), Peer: lo(1), Size: 4096, Iterations: 20, Conns: 1,
		ConnectTimeout: 5 * time.Second, StartAt: time.Now().Add(wait)}
	tr, err := transportFor(cfg.Mode)
	if err != nil {
		t.Fatal(err)
	}
	begun := time.Now()
	_, cli, out, serr, cerr := pair(t, tr, cfg)
	if serr != nil || cerr != nil {
		t.Fatalf("server %v, client %v\n%s", serr, cerr, out)
	}
	took := time.Since(begun)
	if took < wait {
		t.Errorf("the run ended %v after it was given, before its --start-at %v", took, wait)
	}
	// The run follows the wait: its seconds fit in what is left of took
	// (however slow the machine); counting the wait would add about all
	// of it.
	if left := (took - wait + wait/2).Seconds(); cli.Seconds > left {
		t.Errorf("run seconds %.3f include the wait for --start-at (%v; %v in all)", cli.Seconds, wait, took)
	}
	cfg.StartAt = time.Now().Add(-time.Second)
	_, _, out, serr, cerr = pair(t, tr, cfg)
	if serr != nil || cerr != nil {
		t.Fatalf("late: server %v, client %v", serr, cerr)
	}
	if !strings.Contains(out, "after --start-at: starting now") {
		t.Errorf("a client late for --start-at did not say so:\n%s", out)
	}
}
