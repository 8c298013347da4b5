package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/multiplane/multiplane/contract"
)

// reportLoop writes the status under the lease after every apply (spread,
// Config.StatusSpread) and every status interval (jittered), when it changed, re-creating the lease
// whenever it is lost (etcd away longer than the TTL). An idle agent thus
// costs etcd only its lease keepalives. It never blocks applies.
func (a *Agent) reportLoop(ctx context.Context, cli *clientv3.Client) {
	shared := a.cfg.Lease != 0
	r := &reporter{a: a, cli: cli, lease: a.cfg.Lease, shared: shared}
	// Jittered so that many agents started together do not write together.
	next := func() time.Duration {
		iv := a.cfg.StatusInterval
		return iv - iv/10 + rand.N(iv/5+1)
	}
	tick := time.NewTimer(next())
	defer tick.Stop()
	defer r.stop()
	// A change in a plane's reachability is reported at once: fabricd may
	// be judging that plane's links on it (see Evidence).
	var evidence <-chan time.Time
	vs, judges := a.applier.(verdictSource)
	lastVerdicts, lastEvidenceWrite := "", time.Time{}
	if judges {
		t := time.NewTicker(a.cfg.EvidenceInterval)
		defer t.Stop()
		evidence = t.C
		lastVerdicts = vs.Verdicts()
	}
	r.report(ctx)
	var spread <-chan time.Time // a kicked write waiting its turn
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			tick.Reset(next())
		case <-spread:
			spread = nil
		case <-evidence:
			// The verdict counts as reported only once written; writes it
			// triggers are at least minEvidenceSpacing apart.
			if v := vs.Verdicts(); v != lastVerdicts && time.Since(lastEvidenceWrite) >= minEvidenceSpacing {
				if r.report(ctx) {
					lastVerdicts, lastEvidenceWrite = v, time.Now()
				}
			}
			continue
		case <-a.kick:
			if a.cfg.StatusSpread > 0 {
				if spread == nil {
					// Half the spread at least: kicks that close together
					// (an apply and its error) share the write, and the
					// fleet's writes start once most agents have the
					// generation, not while etcd still delivers it. The
					// fleet's spread, when longer, keeps all agents'
					// writes within the rate fabricd asks for.
					s := max(a.cfg.StatusSpread, time.Duration(a.fleetSpread.Load())*time.Millisecond)
					spread = time.After(s/2 + rand.N(s+1))
				}
				continue
			}
		case _, ok := <-r.ka:
			if ok {
				continue
			}
			a.logger.Warn("status lease lost; granting a new one")
			r.revokeLost(ctx)
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
	last     []byte // the status last written under lease
}

// report grants a lease when there is none and puts the status under it;
// it reports whether the status in etcd is now the current one.
func (r *reporter) report(ctx context.Context) bool {
	for attempt := 0; attempt < 2; attempt++ {
		err := r.put(ctx)
		if err == nil {
			if r.failing {
				r.a.logger.Info("status reported again", "lease", int64(r.lease))
				r.failing = false
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		r.a.ctr.statusErrors.Add(1)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && !r.shared {
			r.drop() // expired while etcd was away: grant a new one now
			continue
		}
		if !r.failing {
			r.a.logger.Warn("status not reported; retrying every interval", "err", err)
			r.failing = true
		}
		return false
	}
	return false
}

// minEvidenceSpacing spaces the status writes a change of evidence
// triggers, so a flapping verdict costs etcd at most two writes a second.
const minEvidenceSpacing = 500 * time.Millisecond

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
		r.lease, r.ka, r.kaCancel, r.last = resp.ID, ka, kcancel, nil
	}
	st := r.a.Status()
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if len(data) > contract.MaxStatusBytes { // many planes: the counts stay, the lists go
		for i := range st.Paths {
			st.Paths[i].Peers = nil
		}
		if data, err = json.Marshal(st); err != nil {
			return err
		}
	}
	if bytes.Equal(data, r.last) {
		return nil // unchanged: the lease keeps it; no write to etcd
	}
	pctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	if _, err = r.cli.Put(pctx, r.a.keyStat, string(data), clientv3.WithLease(r.lease)); err != nil {
		r.last = nil
		return err
	}
	r.last = data
	return nil
}

// drop forgets an own lease (after it expired or vanished).
func (r *reporter) drop() {
	if r.shared {
		return
	}
	if r.kaCancel != nil {
		r.kaCancel()
	}
	r.lease, r.ka, r.kaCancel, r.last = 0, nil, nil, nil
}

// revokeLost revokes the own lease whose keepalives stopped, in case it
// still exists (the keepalive stream can end while the lease lives): the
// status under it would outlive the agent by the lease's TTL. Bounded,
// best effort.
func (r *reporter) revokeLost(ctx context.Context) {
	if r.shared || r.lease == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	_, _ = r.cli.Revoke(rctx, r.lease)
}

// stop deletes the status and revokes the own lease; best effort, bounded.
// The status is deleted by name: a put cut off by the shutdown may have
// left it under an earlier lease than the one revoked (seen under -race:
// two leases lost in 5 ms, the status still there after the agent
// stopped).
func (r *reporter) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if r.kaCancel != nil && !r.shared {
		r.kaCancel()
	}
	if _, err := r.cli.Delete(ctx, r.a.keyStat); err != nil {
		r.a.logger.Info("status not deleted; it expires with its lease", "err", err)
	}
	if !r.shared && r.lease != 0 {
		if _, err := r.cli.Revoke(ctx, r.lease); err != nil {
			r.a.logger.Info("status lease not revoked; it expires with its TTL", "err", err)
		}
	}
}
