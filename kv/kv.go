// Package kv connects fabricd and the endpoint agents to the etcd cluster
// they share: either an external cluster (Config.Endpoints) or, by default,
// an embedded single-member etcd server under a data directory on loopback.
//
//	store, err := kv.Open(ctx, kv.Config{DataDir: "var"}, logger)
//	defer store.Close()
//	store.Client.Put(ctx, kv.Prefix+"hello", "world")
//
// All access goes through the clientv3 client in Store.Client.
package kv

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/multiplane/multiplane/internal/cliconf"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Prefix is the root of every key Multiplane writes (docs/etcd-layout.md).
const Prefix = "/multiplane/v1/"

// ErrUnavailable is returned when etcd cannot be reached.
var ErrUnavailable = errors.New("kv: etcd unavailable")

// Config selects the etcd cluster.
type Config struct {
	Endpoints   []string      // external cluster; empty = embedded server
	DataDir     string        // embedded server data lives in DataDir/etcd
	DialTimeout time.Duration // client dial timeout
	CAFile      string        // TLS to an external cluster, or to the embedded one when it has TLS
	CertFile    string
	KeyFile     string

	// The embedded server's client address (default: loopback, a port
	// kept across restarts) and the URL agents are given (default:
	// https://Listen).
	Listen    string
	Advertise string
	// ServerTLS, when set, serves the embedded etcd over TLS with client
	// certificate authentication, and enables etcd's auth with the
	// client certificate (CertFile, KeyFile) as its root user; Gate then
	// refuses revoked certificates.
	ServerTLS *ServerTLS
	Gate      *Gate
}

// RootUser is the etcd user of fabricd's own client certificate (its
// Common Name) when etcd auth is on.
const RootUser = "root"

// RegisterFlags registers the etcd flags on fs with the given prefix for
// environment twins documented in the usage text.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Func("etcd-endpoints", "comma-separated etcd client URLs of an external cluster (default: embedded etcd under --data-dir)", func(s string) error {
		c.Endpoints = cliconf.SplitList(s)
		return nil
	})
	fs.DurationVar(&c.DialTimeout, "etcd-dial-timeout", 5*time.Second, "timeout to connect to etcd")
	fs.StringVar(&c.CAFile, "etcd-ca", "", "CA bundle (PEM) to verify an external etcd cluster")
	fs.StringVar(&c.CertFile, "etcd-cert", "", "client certificate (PEM) for an external etcd cluster")
	fs.StringVar(&c.KeyFile, "etcd-key", "", "client key (PEM) for an external etcd cluster")
	fs.StringVar(&c.Listen, "etcd-listen", "", "client address (IP:PORT) of the embedded etcd (default: 127.0.0.1 and a port kept under --data-dir); beyond loopback it serves TLS with client certificates and etcd auth")
	fs.StringVar(&c.Advertise, "advertise-etcd", "", "etcd client URL given to enrolling endpoints (default: https:// and --etcd-listen; required when that is 0.0.0.0 or ::)")
}

// Beyond reports whether the embedded server is to listen beyond
// loopback (then it must serve TLS with client certificates).
func (c *Config) Beyond() (bool, error) {
	if len(c.Endpoints) > 0 || c.Listen == "" {
		return false, nil
	}
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return false, fmt.Errorf("kv: --etcd-listen %q: %w", c.Listen, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return false, fmt.Errorf("kv: --etcd-listen %q: port must be 1 to 65535", c.Listen)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false, fmt.Errorf("kv: --etcd-listen %q: host must be an IP address", c.Listen)
	}
	return !ip.IsLoopback(), nil
}

// Validate checks the settings that can be judged before anything starts:
// a well-formed --etcd-listen, and the URL agents are given when the
// embedded etcd listens on every address (fabricd cannot guess it).
func (c *Config) Validate() error {
	if _, err := c.Beyond(); err != nil {
		return err
	}
	if len(c.Endpoints) == 0 && c.Listen != "" && c.Advertise == "" {
		if _, err := c.AdvertiseURLs(); err != nil {
			return err
		}
	}
	return nil
}

// AdvertiseURLs are the etcd URLs enrolled endpoints are given.
func (c *Config) AdvertiseURLs() ([]string, error) {
	if len(c.Endpoints) > 0 && c.Advertise == "" {
		return nil, errors.New("kv: an external etcd cluster: set --advertise-etcd to the URLs endpoints reach (fabricd's certificate must be the cluster's root user, its CA the clients' CA)")
	}
	if c.Advertise != "" {
		return cliconf.SplitList(c.Advertise), nil
	}
	if c.Listen == "" {
		return nil, errors.New("kv: the embedded etcd listens on loopback only: set --etcd-listen (and --advertise-etcd) for endpoints on other hosts")
	}
	host, _, _ := net.SplitHostPort(c.Listen)
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		return nil, fmt.Errorf("kv: --etcd-listen %s is every address: set --advertise-etcd to the URL endpoints reach", c.Listen)
	}
	return []string{"https://" + c.Listen}, nil
}

// Store is a connected etcd client, and the embedded server when there is one.
type Store struct {
	Client   *clientv3.Client
	embedded *Embedded
}

// Open connects to the configured cluster, starting the embedded server
// first when no endpoints are given.
func Open(ctx context.Context, cfg Config, logger *slog.Logger) (*Store, error) {
	s := &Store{}
	endpoints := cfg.Endpoints
	if len(endpoints) == 0 {
		emb, err := StartEmbedded(ctx, cfg.DataDir, EmbeddedOptions{Listen: cfg.Listen, TLS: cfg.ServerTLS, Gate: cfg.Gate}, logger)
		if err != nil {
			return nil, err
		}
		s.embedded = emb
		endpoints = emb.Endpoints()
	}
	var tlsCfg *tls.Config
	if cfg.CAFile != "" || cfg.CertFile != "" {
		info := transport.TLSInfo{TrustedCAFile: cfg.CAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile}
		var err error
		if tlsCfg, err = info.ClientConfig(); err != nil {
			s.Close()
			return nil, fmt.Errorf("kv: etcd TLS: %w", err)
		}
	}
	timeout := cfg.DialTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints, DialTimeout: timeout, TLS: tlsCfg, Context: context.WithoutCancel(ctx),
		Logger: zap.NewNop(), DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 3 * time.Second,
	})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	s.Client = cli
	if s.embedded != nil {
		if err := s.embeddedAuth(ctx, cfg.ServerTLS != nil); err != nil {
			s.Close()
			return nil, err
		}
	}
	if err := s.Ready(ctx); err != nil {
		s.Close()
		return nil, err
	}
	logger.Info("etcd connected", "endpoints", strings.Join(endpoints, ","), "embedded", s.embedded != nil)
	return s, nil
}

// embeddedAuth enables etcd auth on a TLS embedded server, and refuses a
// plain one whose data has auth on (fabricd could not read it).
func (s *Store) embeddedAuth(ctx context.Context, secure bool) error {
	if secure {
		return enableAuth(ctx, s.Client)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := s.Client.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if st.Enabled {
		return errors.New("kv: the embedded etcd has auth enabled (it listened beyond loopback, with TLS, before): start fabricd with that --etcd-listen again")
	}
	return nil
}

// enableAuth turns etcd's authentication on, with the root user (no
// password: the client certificate's Common Name names it), unless it is
// on already.
func enableAuth(ctx context.Context, cli *clientv3.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := cli.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("kv: etcd auth status: %w", err)
	}
	if st.Enabled {
		return nil
	}
	if _, err := cli.RoleAdd(ctx, RootUser); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return fmt.Errorf("kv: etcd root role: %w", err)
	}
	if _, err := cli.UserAddWithOptions(ctx, RootUser, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		return fmt.Errorf("kv: etcd root user: %w", err)
	}
	if _, err := cli.UserGrantRole(ctx, RootUser, RootUser); err != nil {
		return fmt.Errorf("kv: etcd root user: %w", err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("kv: enable etcd auth: %w", err)
	}
	return nil
}

// Ready reports whether etcd answers a linearizable read.
func (s *Store) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := s.Client.Get(ctx, Prefix+"ready", clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return nil
}

// Failed is closed when the embedded server fails on its own (see
// Embedded.Failed); it is never closed for an external cluster, whose
// outages the client rides out by reconnecting (Ready reports them).
func (s *Store) Failed() <-chan struct{} {
	if s.embedded == nil {
		return nil
	}
	return s.embedded.Failed()
}

// Err returns why the embedded server failed, once Failed is closed.
func (s *Store) Err() error {
	if s.embedded == nil {
		return nil
	}
	return s.embedded.Err()
}

// Endpoints are the client URLs in use.
func (s *Store) Endpoints() []string { return s.Client.Endpoints() }

// Close closes the client and stops the embedded server, if any.
func (s *Store) Close() error {
	var err error
	if s.Client != nil {
		err = s.Client.Close()
	}
	if s.embedded != nil {
		s.embedded.Close()
	}
	return err
}
