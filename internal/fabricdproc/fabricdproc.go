// Package fabricdproc runs the fabricd binary as a child process for the
// demo and the whole-system benchmarks: start it, wait until /readyz
// answers, call its API with the admin token, stop it cleanly.
//
//	p, err := fabricdproc.Start(ctx, fabricdproc.Options{Bin: "bin/fabricd", DataDir: dir, Args: []string{"--topology", f}})
//	defer p.Stop()
//	err = p.GetJSON(ctx, "/api/v1/planes", &planes)
package fabricdproc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Options say how to run fabricd.
type Options struct {
	Bin     string   // the fabricd binary
	DataDir string   // --data-dir
	Listen  string   // --listen; empty picks a free loopback port
	Args    []string // more flags
	LogPath string   // where its output goes; default <DataDir>/fabricd.log
	// ReadyTimeout bounds the start (first start runs initdb); default 90 s.
	ReadyTimeout time.Duration
	// Netns, if set, runs fabricd in this network namespace (ip netns
	// exec); Dial then reaches it (a dialer that connects from inside).
	Netns string
	Dial  func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Proc is a running fabricd.
type Proc struct {
	cmd     *exec.Cmd
	api     string
	dataDir string
	LogPath string
	done    chan struct{}
	token   string
	client  *http.Client
}

// Start starts fabricd and waits until it is ready. When Options.Listen is
// empty it picks a free loopback port, and picks again if another process
// took the port before fabricd bound it (fabricd exits at start with
// "address already in use").
func Start(ctx context.Context, o Options) (*Proc, error) {
	pick := o.Listen == ""
	for attempt := 1; ; attempt++ {
		opts := o
		if pick {
			addr, err := freeLoopbackAddr()
			if err != nil {
				return nil, err
			}
			opts.Listen = addr
		}
		p, err := start(ctx, opts)
		if pick && attempt < 3 && errors.Is(err, errAddrInUse) {
			continue
		}
		return p, err
	}
}

// errAddrInUse is wrapped when fabricd exited at start because its listen
// address was taken.
var errAddrInUse = errors.New("fabricdproc: listen address in use")

// freeLoopbackAddr is 127.0.0.1 with a port the kernel picked (an ephemeral
// port, so never one `make demo` uses).
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func start(ctx context.Context, o Options) (*Proc, error) {
	if o.LogPath == "" {
		o.LogPath = filepath.Join(o.DataDir, "fabricd.log")
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 90 * time.Second
	}
	if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(o.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	logStart, _ := logFile.Seek(0, io.SeekEnd) // this run's output starts here
	args := append([]string{"--data-dir", o.DataDir, "--listen", o.Listen}, o.Args...)
	cmd := exec.Command(o.Bin, args...)
	if o.Netns != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", o.Netns, o.Bin}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group: a terminal's Ctrl-C reaches it through us, in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("fabricdproc: start %s: %w (run `make build` first)", o.Bin, err)
	}
	p := &Proc{cmd: cmd, api: "http://" + o.Listen, dataDir: o.DataDir, LogPath: o.LogPath, done: make(chan struct{}),
		client: &http.Client{Transport: &http.Transport{DialContext: o.Dial}, Timeout: 30 * time.Second}}
	tlsOn := slices.Contains(o.Args, "--tls")
	if tlsOn {
		p.api = "https://" + o.Listen
	}
	go func() { cmd.Wait(); logFile.Close(); close(p.done) }()
	deadline := time.Now().Add(o.ReadyTimeout)
	for {
		// With --tls, the CA must be there (fabricd writes it first).
		if (!tlsOn || p.trustCA()) && p.ready() {
			break
		}
		select {
		case <-p.done:
			err := fmt.Errorf("fabricdproc: fabricd exited at start (%v); %s ends with:\n%s", cmd.ProcessState, o.LogPath, logTail(o.LogPath, 20))
			if out := logSince(o.LogPath, logStart); strings.Contains(out, "address already in use") && strings.Contains(out, o.Listen) {
				err = fmt.Errorf("%w: %s: %w", errAddrInUse, o.Listen, err)
			}
			return nil, err
		case <-ctx.Done():
			p.Stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("fabricdproc: fabricd not ready after %v; see %s", o.ReadyTimeout, o.LogPath)
		}
	}
	tok, err := os.ReadFile(filepath.Join(o.DataDir, "admin.token"))
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("fabricdproc: %w", err)
	}
	p.token = strings.TrimSpace(string(tok))
	return p, nil
}

func (p *Proc) ready() bool {
	resp, err := p.client.Get(p.api + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// trustCA makes the client trust the CA fabricd wrote under its data
// directory (for --tls); false until it exists.
func (p *Proc) trustCA() bool {
	pem, err := os.ReadFile(filepath.Join(p.dataDir, "pki", "ca.crt"))
	pool := x509.NewCertPool()
	if err != nil || !pool.AppendCertsFromPEM(pem) {
		return false
	}
	t := p.client.Transport.(*http.Transport)
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return true
}

// Client is the HTTP client that reaches fabricd (through Options.Dial,
// trusting its CA).
func (p *Proc) Client() *http.Client { return p.client }

// URL is the API base, like http://127.0.0.1:8080.
func (p *Proc) URL() string { return p.api }

// Token is the admin token.
func (p *Proc) Token() string { return p.token }

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Do calls the API with the admin token.
func (p *Proc) Do(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, p.api+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	return p.client.Do(req)
}

// GetJSON decodes a GET of path into v.
func (p *Proc) GetJSON(ctx context.Context, path string, v any) error {
	resp, err := p.Do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("fabricdproc: GET %s: %s: %s", path, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Stop sends SIGINT and waits up to 15 s, then kills.
func (p *Proc) Stop() {
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// Kill kills fabricd at once (-9), as a crash would.
func (p *Proc) Kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// logSince returns the file at path from offset on ("" if unreadable).
func logSince(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil || offset > int64(len(b)) {
		return ""
	}
	return string(b[offset:])
}

// logTail returns the last n lines of the file at path, for error messages
// (a test's log file is gone with its temporary directory).
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
