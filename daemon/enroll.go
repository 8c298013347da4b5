package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/multiplane/multiplane/enrollment"
	"github.com/multiplane/multiplane/inventory"
	"github.com/multiplane/multiplane/kv"
	"github.com/multiplane/multiplane/pki"
	"github.com/multiplane/multiplane/store"
)

// enrollRunner keeps endpoint identities in step with the topology: an
// endpoint removed or renamed loses its certificates and etcd user.
type enrollRunner struct {
	svc    *enrollment.Service
	inv    *inventory.Inventory
	logger *slog.Logger
	kicks  chan struct{}
}

func newEnrollment(ctx context.Context, cfg Config, etcdCfg kv.Config, db *store.DB, ca *pki.CA, kvs *kv.Store,
	inv *inventory.Inventory, logger *slog.Logger) (*enrollRunner, error) {
	logger = logger.With("component", "enrollment")
	if cfg.EndpointCertTTL < 30*time.Second {
		return nil, fmt.Errorf("fabricd: --endpoint-cert-ttl %v is under 30s", cfg.EndpointCertTTL)
	}
	urls, err := etcdCfg.AdvertiseURLs()
	if err != nil {
		logger.Info("endpoint enrollment off", "reason", err)
		urls = nil
	}
	known := func(ctx context.Context, name string) (bool, error) {
		snap, err := inv.Current(ctx)
		if err != nil {
			return false, err
		}
		for _, e := range snap.Topology.Endpoints {
			if e.Name == name {
				return true, nil
			}
		}
		return false, nil
	}
	svc := enrollment.New(db.Pool(), ca, kvs.Client, etcdCfg.Gate, known, enrollment.Config{EtcdURLs: urls, CertTTL: cfg.EndpointCertTTL})
	if err := svc.LoadRevoked(ctx); err != nil {
		return nil, fmt.Errorf("fabricd: %w", err)
	}
	r := &enrollRunner{svc: svc, inv: inv, logger: logger, kicks: make(chan struct{}, 1)}
	r.kick()
	return r, nil
}

func (r *enrollRunner) kick() {
	select {
	case r.kicks <- struct{}{}:
	default:
	}
}

// run syncs on every kick until ctx ends; a failed sync is retried.
func (r *enrollRunner) run(ctx context.Context) {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kicks:
		case <-retry.C:
		}
		if err := r.sync(ctx); err != nil && ctx.Err() == nil {
			r.logger.Warn("endpoint identities not synced with the topology; retrying", "err", err)
			retry.Reset(5 * time.Second)
		}
	}
}

func (r *enrollRunner) sync(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	snap, err := r.inv.Current(ctx)
	if err != nil {
		return err
	}
	names := map[string]bool{}
	for _, e := range snap.Topology.Endpoints {
		names[e.Name] = true
	}
	return r.svc.Sync(ctx, func(n string) bool { return names[n] })
}
