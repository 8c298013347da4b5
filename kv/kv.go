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
	"strings"
	"time"

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
	CAFile      string        // TLS to an external cluster
	CertFile    string
	KeyFile     string
}

// RegisterFlags registers the etcd flags on fs with the given prefix for
// environment twins documented in the usage text.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Func("etcd-endpoints", "comma-separated etcd client URLs of an external cluster (default: embedded etcd under --data-dir)", func(s string) error {
		c.Endpoints = nil
		for _, e := range strings.Split(s, ",") {
			if e = strings.TrimSpace(e); e != "" {
				c.Endpoints = append(c.Endpoints, e)
			}
		}
		return nil
	})
	fs.DurationVar(&c.DialTimeout, "etcd-dial-timeout", 5*time.Second, "timeout to connect to etcd")
	fs.StringVar(&c.CAFile, "etcd-ca", "", "CA bundle (PEM) to verify an external etcd cluster")
	fs.StringVar(&c.CertFile, "etcd-cert", "", "client certificate (PEM) for an external etcd cluster")
	fs.StringVar(&c.KeyFile, "etcd-key", "", "client key (PEM) for an external etcd cluster")
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
		emb, err := StartEmbedded(ctx, cfg.DataDir, logger)
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
	if err := s.Ready(ctx); err != nil {
		s.Close()
		return nil, err
	}
	logger.Info("etcd connected", "endpoints", strings.Join(endpoints, ","), "embedded", s.embedded != nil)
	return s, nil
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
