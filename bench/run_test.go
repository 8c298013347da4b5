package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/multiplane/multiplane/internal/testenv"
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
	scfg.Role = RoleServer
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
	cli, cerr = runClient(ctx, &ccfg, tr, &stderr)
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
				for _, k := range []string{"goodput_bps", "bytes", "seconds", "messages", "retransmits", "connections", "per_plane_bytes", "mode"} {
					if _, ok := j[k]; !ok {
						t.Errorf("JSON lacks %q", k)
					}
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
	for name, mut := range map[string]func(*Config){
		"role":     func(c *Config) { c.Role = "x" },
		"mode":     func(c *Config) { c.Mode = "x" },
		"nopeer":   func(c *Config) { c.Peer = nil },
		"mismatch": func(c *Config) { c.Peer = lo(3) },
		"size":     func(c *Config) { c.Size = 10 },
		"conns":    func(c *Config) { c.Conns = 0 },
		"iters":    func(c *Config) { c.Iterations = 0 },
	} {
		c := good
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrUsage) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
