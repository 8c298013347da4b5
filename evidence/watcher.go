package evidence

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/planes"
)

// Observer takes the links' evidence (the health engine): all of it, or
// what changed (a zero LinkEvidence: none).
type Observer interface {
	ObserveEvidence(all map[string]planes.LinkEvidence)
	ChangeEvidence(changes map[string]planes.LinkEvidence)
}

// Debounce is how long the watcher gathers status changes before it
// judges again: a burst of agents reporting is judged once.
const Debounce = 50 * time.Millisecond

// Watcher follows the agents' statuses in etcd and gives the Observer
// the links' evidence whenever it changes. It keeps a small report per
// endpoint of the topology only: statuses of other names cost nothing.
type Watcher struct {
	cli    *clientv3.Client
	obs    Observer
	logger *slog.Logger
	now    func() time.Time

	invalid prometheus.Counter

	mu      sync.Mutex
	links   []planes.Link
	known   map[string]bool   // endpoints of the topology
	reports map[string]report // by endpoint
	vouch   map[vouchKey]int
	badWhy  map[string]string              // each endpoint's last refusal, logged once
	last    map[string]planes.LinkEvidence // as last given, for Since
	// What changed since the last judgment: only the links of these
	// endpoints and addresses are judged again (a wave of thousands of
	// statuses after each generation must not cost the whole fabric each
	// time), unless all is set (a new topology).
	byEndpoint  map[string][]int // link indexes
	byAddress   map[vouchKey][]int
	changedEnds map[string]bool
	changedAddr map[vouchKey]bool
	all         bool
	dirty       chan struct{}
	resync      chan struct{}
}

// New returns a watcher of cli's statuses feeding obs.
func New(cli *clientv3.Client, obs Observer, logger *slog.Logger) *Watcher {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Watcher{cli: cli, obs: obs, logger: logger, now: time.Now,
		invalid: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "multiplane", Subsystem: "evidence",
			Name: "invalid_statuses_total", Help: "Agent statuses fabricd could not use as evidence (malformed, wrong name, newer schema, over the bounds)."}),
		known: map[string]bool{}, reports: map[string]report{}, vouch: map[vouchKey]int{}, badWhy: map[string]string{},
		last: map[string]planes.LinkEvidence{}, changedEnds: map[string]bool{}, changedAddr: map[vouchKey]bool{},
		dirty: make(chan struct{}, 1), resync: make(chan struct{}, 1)}
}

// Collector returns the watcher's metrics.
func (w *Watcher) Collector() prometheus.Collector { return w.invalid }

// SetTopology sets the links to judge. Statuses of endpoints new to the
// topology are read again from etcd.
func (w *Watcher) SetTopology(links []planes.Link) {
	w.mu.Lock()
	known := map[string]bool{}
	added := false
	for _, l := range links {
		known[l.Endpoint] = true
		added = added || !w.known[l.Endpoint]
	}
	for name := range w.reports {
		if !known[name] {
			w.setLocked(name, nil)
		}
	}
	for name := range w.badWhy {
		if !known[name] {
			delete(w.badWhy, name)
		}
	}
	w.links, w.known, w.all = links, known, true
	w.byEndpoint, w.byAddress = map[string][]int{}, map[vouchKey][]int{}
	for i, l := range links {
		w.byEndpoint[l.Endpoint] = append(w.byEndpoint[l.Endpoint], i)
		k := vouchKey{l.Plane, l.Address.Unmap()}
		w.byAddress[k] = append(w.byAddress[k], i)
	}
	w.mu.Unlock()
	w.signal(w.dirty)
	if added {
		w.signal(w.resync)
	}
}

func (w *Watcher) signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Run follows etcd until ctx ends, re-reading every status after a broken
// watch.
func (w *Watcher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { w.publish(ctx) })
	wait := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := w.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errResync) {
			wait = 100 * time.Millisecond
			continue
		}
		w.logger.Warn("status watch broken; reading every status again", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait/2 + rand.N(wait/2+1)):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

var errResync = errors.New("evidence: topology gained endpoints")

// follow reads every status, then applies changes until the watch breaks.
func (w *Watcher) follow(ctx context.Context) error {
	select {
	case <-w.resync: // this read covers it
	default:
	}
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	resp, err := w.cli.Get(gctx, contract.PrefixStatus, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return err
	}
	w.mu.Lock()
	seen := map[string]bool{}
	for _, kv := range resp.Kvs {
		name := strings.TrimPrefix(string(kv.Key), contract.PrefixStatus)
		seen[name] = true
		w.putLocked(name, kv.Value)
	}
	for name := range w.reports {
		if !seen[name] {
			w.setLocked(name, nil)
		}
	}
	w.mu.Unlock()
	w.signal(w.dirty)

	wctx, stop := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer stop()
	wch := w.cli.Watch(wctx, contract.PrefixStatus, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.resync:
			return errResync
		case wr, ok := <-wch:
			if !ok {
				return errors.New("evidence: watch closed")
			}
			if err := wr.Err(); err != nil {
				return err
			}
			w.mu.Lock()
			for _, ev := range wr.Events {
				name := strings.TrimPrefix(string(ev.Kv.Key), contract.PrefixStatus)
				if ev.Type == mvccpb.DELETE {
					w.setLocked(name, nil)
				} else {
					w.putLocked(name, ev.Kv.Value)
				}
			}
			w.mu.Unlock()
			w.signal(w.dirty)
		}
	}
}

// putLocked parses endpoint's status; one that cannot be used takes its
// evidence away (the agent's word is no longer known). w.mu held.
func (w *Watcher) putLocked(name string, data []byte) {
	if !w.known[name] {
		return
	}
	st, err := contract.ParseStatus(name, data)
	if err != nil {
		w.invalid.Inc()
		// Once per endpoint and reason: an agent rewriting a bad status,
		// or a fleet upgraded to a newer schema, does not flood the log.
		if why := truncate(err.Error(), 300); w.badWhy[name] != why {
			w.badWhy[name] = why
			w.logger.Warn("agent status not used as evidence", "endpoint", name, "err", why)
		}
		w.setLocked(name, nil)
		return
	}
	delete(w.badWhy, name)
	w.setLocked(name, newReport(st))
}

// setLocked replaces endpoint's report (nil: none), keeping the vouch
// counts; w.mu held.
func (w *Watcher) setLocked(name string, r report) {
	w.changedEnds[name] = true
	if old, ok := w.reports[name]; ok {
		old.vouches(func(k vouchKey) {
			w.changedAddr[k] = true
			if w.vouch[k]--; w.vouch[k] <= 0 {
				delete(w.vouch, k)
			}
		})
		delete(w.reports, name)
	}
	if r != nil {
		w.reports[name] = r
		r.vouches(func(k vouchKey) {
			w.changedAddr[k] = true
			w.vouch[k]++
		})
	}
}

// publish judges after each burst of changes and hands the result on.
func (w *Watcher) publish(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.dirty:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(Debounce):
		}
		if ev, all := w.judge(); all {
			w.obs.ObserveEvidence(ev)
		} else if len(ev) > 0 {
			w.obs.ChangeEvidence(ev)
		}
	}
}

// judge judges the links whose endpoint's report or address's vouchers
// changed, keeping Since while a verdict holds, and returns what changed;
// after a new topology, every link's evidence (all).
func (w *Watcher) judge() (ev map[string]planes.LinkEvidence, all bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	links := w.links
	if all = w.all; !all {
		seen := map[int]bool{}
		links = nil
		add := func(idx []int) {
			for _, i := range idx {
				if !seen[i] {
					seen[i] = true
					links = append(links, w.links[i])
				}
			}
		}
		for name := range w.changedEnds {
			add(w.byEndpoint[name])
		}
		for k := range w.changedAddr {
			add(w.byAddress[k])
		}
	}
	w.all = false
	clear(w.changedEnds)
	clear(w.changedAddr)
	judged := Judge(links, w.reports, w.vouch)
	last := w.last
	if all {
		w.last = map[string]planes.LinkEvidence{} // links gone leave it
	}
	ev = map[string]planes.LinkEvidence{}
	for _, l := range links {
		e, has := judged[l.Name]
		prev, had := last[l.Name]
		switch {
		case !has && !had:
			continue
		case !has:
			delete(w.last, l.Name)
			ev[l.Name] = planes.LinkEvidence{}
			continue
		case had && prev.State == e.State:
			e.Since = prev.Since
		default:
			e.Since = now
		}
		w.last[l.Name] = e
		if all || !had || prev.State != e.State || prev.Reason != e.Reason {
			ev[l.Name] = e
		}
	}
	return ev, all
}

// truncate shortens s to at most n bytes of valid UTF-8.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
