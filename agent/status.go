package agent

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// reportLoop writes the status under the lease on every apply and every
// status interval, re-creating the lease whenever it is lost (etcd away
// longer than the TTL). It never blocks applies.
func (a *Agent) reportLoop(ctx context.Context, cli *clientv3.Client) {
	shared := a.cfg.Lease != 0
	r := &reporter{a: a, cli: cli, lease: a.cfg.Lease, shared: shared}
	tick := time.NewTicker(a.cfg.StatusInterval)
	defer tick.Stop()
	defer r.stop()
	r.report(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-a.kick:
		case _, ok := <-r.ka:
			if ok {
				continue
			}
			a.logger.Warn("status lease lost; granting a new one")
			r.drop()
		}
		r.report(ctx)
	}
}

type reporter struct {
	a        *Agent
	cli      *clientv3.Client
	shared   bool
	lease    clientv3.LeaseID
	ka       <-chan *clientv3.LeaseKeepAliveResponse
	kaCancel context.CancelFunc
	failing  bool
}

// report grants a lease when there is none and puts the status under it.
func (r *reporter) report(ctx context.Context) {
	for attempt := 0; attempt < 2; attempt++ {
		err := r.put(ctx)
		if err == nil {
			if r.failing {
				r.a.logger.Info("status reported again", "lease", int64(r.lease))
				r.failing = false
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && !r.shared {
			r.drop() // expired while etcd was away: grant a new one now
			continue
		}
		if !r.failing {
			r.a.logger.Warn("status not reported; retrying every interval", "err", err)
			r.failing = true
		}
		return
	}
}

func (r *reporter) put(ctx context.Context) error {
	if r.lease == 0 {
		gctx, cancel := context.WithTimeout(ctx, writeTimeout)
		resp, err := r.cli.Grant(gctx, int64(r.a.cfg.LeaseTTL/time.Second))
		cancel()
		if err != nil {
			return err
		}
		kctx, kcancel := context.WithCancel(ctx)
		ka, err := r.cli.KeepAlive(kctx, resp.ID)
		if err != nil {
			kcancel()
			return err
		}
		r.lease, r.ka, r.kaCancel = resp.ID, ka, kcancel
	}
	data, err := json.Marshal(r.a.Status())
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	_, err = r.cli.Put(pctx, r.a.keyStat, string(data), clientv3.WithLease(r.lease))
	return err
}

// drop forgets an own lease (after it expired or vanished).
func (r *reporter) drop() {
	if r.shared {
		return
	}
	if r.kaCancel != nil {
		r.kaCancel()
	}
	r.lease, r.ka, r.kaCancel = 0, nil, nil
}

// stop revokes the own lease, which deletes the status, or deletes the
// status from a shared lease; best effort, bounded.
func (r *reporter) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	switch {
	case r.shared:
		r.cli.Delete(ctx, r.a.keyStat)
	case r.lease != 0:
		if r.kaCancel != nil {
			r.kaCancel()
		}
		if _, err := r.cli.Revoke(ctx, r.lease); err != nil {
			r.a.logger.Info("status lease not revoked; it expires with its TTL", "err", err)
		}
	}
}
