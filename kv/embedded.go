package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Embedded is a single-member etcd server, on loopback unless told
// otherwise.
type Embedded struct {
	etcd      *embed.Etcd
	client    string
	secure    bool
	closeOnce sync.Once
	closing   chan struct{} // closed when Close begins
	failed    chan struct{} // closed when the server failed on its own
	failErr   error         // why, valid after failed
	watchDone chan struct{}
}

type embeddedPorts struct {
	Client int `json:"client"`
	Peer   int `json:"peer"`
}

// EmbeddedOptions configure the embedded server; the zero value is a
// plain server on loopback ports chosen on first start.
type EmbeddedOptions struct {
	// Listen is the client address, host:port (default: 127.0.0.1 and a
	// free port, kept across restarts).
	Listen string
	// TLS, when set, serves clients over TLS and requires a client
	// certificate from its CA (etcd takes the Common Name as the user).
	TLS *ServerTLS
	// Gate, when set, refuses revoked client certificates (TLS only).
	Gate *Gate
}

// ServerTLS are the embedded server's TLS files (PEM).
type ServerTLS struct {
	CertFile, KeyFile string // the server's certificate, valid for the Listen host
	ClientCAFile      string // CA of the client certificates it accepts
}

// StartEmbedded starts (or restarts, keeping its data) an etcd server in
// dir/etcd. Its loopback ports are chosen free on first start and kept in
// dir/etcd/ports.json so a restart finds the same member.
func StartEmbedded(ctx context.Context, dir string, opts EmbeddedOptions, logger *slog.Logger) (*Embedded, error) {
	if dir == "" {
		return nil, errors.New("kv: embedded etcd needs a data directory")
	}
	base := filepath.Join(dir, "etcd")
	if err := os.MkdirAll(base, 0o700); err != nil {
		return nil, fmt.Errorf("kv: %w", err)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		ports, err := loadOrPickPorts(filepath.Join(base, "ports.json"), attempt > 0)
		if err != nil {
			return nil, err
		}
		e, err := startEtcd(ctx, base, ports, opts)
		if err == nil {
			logger.Info("embedded etcd started", "dir", base, "client_url", e.client, "tls", e.secure)
			return e, nil
		}
		lastErr = err
		if opts.Listen != "" {
			return nil, err // its port is the operator's: no other to try
		}
		logger.Warn("embedded etcd did not start, retrying with other ports", "err", err)
	}
	return nil, lastErr
}

func startEtcd(ctx context.Context, base string, ports embeddedPorts, opts EmbeddedOptions) (*Embedded, error) {
	cfg := embed.NewConfig()
	cfg.Name = "fabricd"
	cfg.Dir = filepath.Join(base, "data")
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports.Client)}
	if opts.Listen != "" {
		clientURL.Host = opts.Listen
	}
	if opts.TLS != nil {
		clientURL.Scheme = "https"
		cfg.ClientTLSInfo.CertFile, cfg.ClientTLSInfo.KeyFile = opts.TLS.CertFile, opts.TLS.KeyFile
		cfg.ClientTLSInfo.TrustedCAFile = opts.TLS.ClientCAFile
		cfg.ClientTLSInfo.ClientCertAuth = true
		cfg.TlsMinVersion = "TLS1.2"
		// The JSON gateway would carry requests under its own identity.
		cfg.EnableGRPCGateway = false
		if opts.Gate != nil {
			cfg.GRPCAdditionalServerOptions = opts.Gate.ServerOptions()
		}
	}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports.Peer)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{clientURL}, []url.URL{clientURL}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peerURL}, []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(base, "etcd.log")}
	// A single member keeps its raft log in memory until a snapshot, and
	// the entries after it for followers (etcd's defaults: 10,000 and
	// 5,000 entries of agents' status writes). No follower needs them.
	cfg.SnapshotCount, cfg.SnapshotCatchUpEntries = 2000, 500
	// Keep a minute of history, not a count of revisions: 10,000
	// revisions were 3 hours of a small fabric's status writes (the
	// database file and the pages fabricd has mapped grew all along: the
	// dashboard soak's RSS never levelled) and 25 s of 4,000 agents'. A
	// watcher further behind re-reads (docs/etcd-layout.md).
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "1m"
	cfg.QuotaBackendBytes = 2 << 30
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("kv: start embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("kv: embedded etcd: %w", err)
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, errors.New("kv: embedded etcd not ready after 30s (see etcd.log in its data directory)")
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	emb := &Embedded{etcd: e, client: clientURL.String(), secure: opts.TLS != nil, closing: make(chan struct{}),
		failed: make(chan struct{}), watchDone: make(chan struct{})}
	go emb.watch()
	return emb, nil
}

// watch notices the server failing or stopping other than by Close.
func (e *Embedded) watch() {
	defer close(e.watchDone)
	var err error
	select {
	case <-e.closing:
		return
	case err = <-e.etcd.Err():
	case <-e.etcd.Server.StopNotify():
		err = errors.New("server stopped")
	}
	select {
	case <-e.closing:
		return // Close stopped it
	default:
	}
	if err == nil { // Err closed
		err = errors.New("server stopped")
	}
	e.failErr = fmt.Errorf("kv: embedded etcd failed: %w", err)
	close(e.failed)
}

// Failed is closed when the server fails or stops on its own (not by
// Close); Err then says why. fabricd exits when it does.
func (e *Embedded) Failed() <-chan struct{} { return e.failed }

// Err returns why the server failed, once Failed is closed; nil before.
func (e *Embedded) Err() error {
	select {
	case <-e.failed:
		return e.failErr
	default:
		return nil
	}
}

// loadOrPickPorts reuses the saved ports, or picks free ones (always when
// repick is set) and saves them.
func loadOrPickPorts(path string, repick bool) (embeddedPorts, error) {
	var p embeddedPorts
	if !repick {
		if data, err := os.ReadFile(path); err == nil && json.Unmarshal(data, &p) == nil && p.Client > 0 && p.Peer > 0 {
			return p, nil
		}
	}
	var err error
	if p.Client, err = freePort(); err != nil {
		return p, err
	}
	if p.Peer, err = freePort(); err != nil {
		return p, err
	}
	data, _ := json.Marshal(p)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return p, fmt.Errorf("kv: %w", err)
	}
	return p, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("kv: pick a port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Endpoints are the server's client URLs, to dial from this host (an
// unspecified listen address is dialed on loopback).
func (e *Embedded) Endpoints() []string {
	u, err := url.Parse(e.client)
	if err != nil {
		return []string{e.client}
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil && ip.IsUnspecified() {
		lo := "127.0.0.1"
		if ip.Is6() {
			lo = "::1"
		}
		u.Host = net.JoinHostPort(lo, u.Port())
	}
	return []string{u.String()}
}

// Close stops the server and waits for it; later calls do nothing.
func (e *Embedded) Close() {
	e.closeOnce.Do(func() {
		close(e.closing)
		e.etcd.Close()
		<-e.watchDone
	})
}

// EmbeddedEndpoints returns the client URL of the embedded etcd a fabricd
// with this data directory runs (or last ran), for agents on the same host.
func EmbeddedEndpoints(dataDir string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(dataDir, "etcd", "ports.json"))
	if err != nil {
		return nil, fmt.Errorf("kv: no embedded etcd under %s: %w", dataDir, err)
	}
	var p embeddedPorts
	if err := json.Unmarshal(data, &p); err != nil || p.Client == 0 {
		return nil, fmt.Errorf("kv: %s/etcd/ports.json is not valid", dataDir)
	}
	return []string{fmt.Sprintf("http://127.0.0.1:%d", p.Client)}, nil
}
