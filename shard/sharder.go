package shard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/planes"
	"github.com/multiplane/multiplane/telemetry"
)

// prefix holds every key of the package.
const prefix = contract.Prefix + "shard/"

// opTimeout bounds one etcd request.
const opTimeout = 2 * time.Second

// ViewDoc is the value under contract.PrefixSwitchViews: the owner's view
// of a switch.
type ViewDoc struct {
	Owner string            `json:"owner"`
	View  planes.SwitchView `json:"view"`
}

// Sharder runs one replica's side of the sharing. SetSwitches, Changed,
// Statuses and Handover may be called from any goroutine.
type Sharder struct {
	cli *clientv3.Client
	cfg Config
	eng Engine
	col Collector
	log *slog.Logger
	m   *metrics

	kick  chan struct{} // reconcile now
	dirty chan struct{} // a transition: publish changed states now
	leave chan chan struct{}

	mu         sync.Mutex
	switches   map[string]bool   // of the topology
	members    map[string]bool   // live replicas
	owners     map[string]string // switch -> replica
	views      map[string]planes.SwitchView
	collecting map[string]bool
	remote     map[string]bool   // not owned here (the engine's remote switches)
	told       map[string]string // owners as last given to the engine
	written    map[string][]byte // last view written, by switch
	writtenSt  map[string][]byte // its states only
}

// New returns a sharder; Run runs it.
func New(cli *clientv3.Client, cfg Config, eng Engine, col Collector, log *slog.Logger) (*Sharder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Sharder{cli: cli, cfg: cfg, eng: eng, col: col, log: logger(log).With("replica", cfg.ID), m: newMetrics(),
		kick: make(chan struct{}, 1), dirty: make(chan struct{}, 1), leave: make(chan chan struct{}),
		switches: map[string]bool{}, members: map[string]bool{}, owners: map[string]string{},
		views: map[string]planes.SwitchView{}, written: map[string][]byte{}, writtenSt: map[string][]byte{}}, nil
}

// SetSwitches sets the topology's switches.
func (s *Sharder) SetSwitches(names []string) {
	s.mu.Lock()
	s.switches = map[string]bool{}
	for _, n := range names {
		s.switches[n] = true
	}
	s.mu.Unlock()
	signal(s.kick)
}

// Changed tells the sharder that the engine made a transition: the views
// of the switches it owns are published at once if their states changed.
func (s *Sharder) Changed() { signal(s.dirty) }

// Statuses returns every switch's owner as this replica knows it.
func (s *Sharder) Statuses() []Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Status, 0, len(s.switches))
	for sw := range s.switches {
		out = append(out, Status{Switch: sw, Owner: s.owners[sw], Collecting: s.collecting[sw]})
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Switch, b.Switch) })
	return out
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Handover hands this replica's switches to the others, make-before-
// break, and lets its lease go; it returns when they took them all, when
// no other replica is live, or after Config.HandoverTimeout. Run then
// stops collecting. Call it before stopping the collector.
func (s *Sharder) Handover(ctx context.Context) {
	done := make(chan struct{})
	select {
	case s.leave <- done:
	case <-ctx.Done():
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// errLeft ends a term after Handover.
var errLeft = errors.New("shard: handed over")

// Run shares the switches until ctx ends or Handover completes.
func (s *Sharder) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		err := s.term(ctx)
		if errors.Is(err, errLeft) {
			<-ctx.Done()
			return nil
		}
		if ctx.Err() != nil {
			break
		}
		s.log.Warn("telemetry sharing interrupted; joining again", "err", err)
		sleepCtx(ctx, 500*time.Millisecond)
	}
	return nil
}

// term is one lease's life.
func (s *Sharder) term(ctx context.Context) error {
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(s.cfg.TTL), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("shard: session: %w", err)
	}
	defer sess.Close()
	t := &term{s: s, sess: sess, member: contract.PrefixReplicas + s.cfg.ID}
	if err := t.put(ctx, t.member, s.cfg.ID, clientv3.WithLease(sess.Lease())); err != nil {
		return fmt.Errorf("shard: register: %w", err)
	}
	s.log.Info("telemetry sharing joined", "lease_ttl_seconds", s.cfg.TTL)
	defer s.lost()
	for {
		err := t.follow(ctx)
		if err == nil || errors.Is(err, errLeft) || ctx.Err() != nil {
			return err
		}
		select {
		case <-sess.Done():
			return fmt.Errorf("shard: lease lost: %w", err)
		default:
		}
		s.log.Warn("telemetry sharing: watch ended; reading again", "err", err)
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// lost forgets this replica's ownership when its lease is gone (etcd
// deleted its keys): nothing is collected until the next term claims.
func (s *Sharder) lost() {
	s.mu.Lock()
	for sw, o := range s.owners {
		if o == s.cfg.ID {
			delete(s.owners, sw)
		}
	}
	s.mu.Unlock()
}

type term struct {
	s       *Sharder
	sess    *concurrency.Session
	member  string
	leaving chan struct{} // Handover's, once asked
	until   time.Time     // Handover's deadline
}

func (t *term) put(ctx context.Context, key, val string, opts ...clientv3.OpOption) error {
	c, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	_, err := t.s.cli.Put(c, key, val, opts...)
	return err
}

// txn runs If(cmp) Then(op) and reports whether it succeeded.
func (t *term) txn(ctx context.Context, cmp clientv3.Cmp, op clientv3.Op) (bool, error) {
	c, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	resp, err := t.s.cli.Txn(c).If(cmp).Then(op).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// follow reads the shared state and follows it with a watch.
func (t *term) follow(ctx context.Context) error {
	s := t.s
	c, cancel := context.WithTimeout(ctx, opTimeout)
	resp, err := s.cli.Get(c, prefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.members, s.owners = map[string]bool{}, map[string]string{}
	s.mu.Unlock()
	for _, kv := range resp.Kvs {
		t.apply(&clientv3.Event{Type: clientv3.EventTypePut, Kv: kv})
	}
	wctx, stop := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer stop()
	wch := s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	poll := time.NewTicker(s.cfg.Poll)
	defer poll.Stop()
	pub := time.NewTicker(s.cfg.PublishEvery)
	defer pub.Stop()
	t.reconcile(ctx)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.sess.Done():
			return errors.New("shard: lease expired")
		case wr, ok := <-wch:
			if !ok {
				return errors.New("shard: watch closed")
			}
			if err := wr.Err(); err != nil {
				return err
			}
			for _, ev := range wr.Events {
				t.apply(ev)
			}
		case <-s.kick:
		case <-poll.C:
		case <-pub.C:
			t.publish(ctx, false)
			continue
		case <-s.dirty:
			t.publish(ctx, true)
			continue
		case done := <-s.leave:
			t.leaving, t.until = done, time.Now().Add(s.cfg.HandoverTimeout)
			if _, err := s.cli.Delete(ctx, t.member); err != nil {
				s.log.Warn("telemetry sharing: leaving", "err", err)
			}
			s.log.Info("telemetry sharing: handing switches over")
		}
		t.reconcile(ctx)
		if t.leaving != nil && t.handedOver() {
			return t.left()
		}
	}
}

// handedOver reports whether Handover may let the lease go.
func (t *term) handedOver() bool {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	others := 0
	for id := range s.members {
		if id != s.cfg.ID {
			others++
		}
	}
	mine := 0
	for _, o := range s.owners {
		if o == s.cfg.ID {
			mine++
		}
	}
	return mine == 0 || others == 0 || time.Now().After(t.until)
}

// left ends the term after a handover: the lease goes (and with it any
// switch nobody took), collection stops.
func (t *term) left() error {
	s := t.s
	c, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if _, err := s.cli.Revoke(c, t.sess.Lease()); err != nil {
		s.log.Warn("telemetry sharing: lease not revoked", "err", err)
	}
	s.mu.Lock()
	s.collecting = map[string]bool{}
	s.mu.Unlock()
	s.col.Select(map[string]bool{})
	s.log.Info("telemetry sharing: left")
	close(t.leaving)
	return errLeft
}

// apply takes one change of the shared state.
func (t *term) apply(ev *clientv3.Event) {
	s := t.s
	key, put := string(ev.Kv.Key), ev.Type == clientv3.EventTypePut
	switch {
	case strings.HasPrefix(key, contract.PrefixReplicas):
		id := strings.TrimPrefix(key, contract.PrefixReplicas)
		s.mu.Lock()
		if put {
			s.members[id] = true
			signal(s.dirty) // the newcomer reads the views
		} else {
			delete(s.members, id)
		}
		s.mu.Unlock()
	case strings.HasPrefix(key, contract.PrefixOwners):
		sw := strings.TrimPrefix(key, contract.PrefixOwners)
		s.mu.Lock()
		if put {
			s.owners[sw] = string(ev.Kv.Value)
		} else {
			delete(s.owners, sw)
		}
		s.mu.Unlock()
	case strings.HasPrefix(key, contract.PrefixSwitchViews) && put:
		var d ViewDoc
		if err := json.Unmarshal(ev.Kv.Value, &d); err != nil || d.View.Switch != strings.TrimPrefix(key, contract.PrefixSwitchViews) {
			s.log.Warn("telemetry sharing: ignoring a malformed switch view", "key", key, "err", err)
			return
		}
		s.mu.Lock()
		s.views[d.View.Switch] = d.View
		remote := s.remote[d.View.Switch]
		s.mu.Unlock()
		if remote && s.eng.ImportSwitch(d.View) {
			s.m.imports.Inc()
		}
	}
}

// reconcile claims and takes over the switches this replica should own,
// and makes collection and the engine follow ownership.
func (t *term) reconcile(ctx context.Context) {
	s := t.s
	me := s.cfg.ID
	status := map[string]telemetry.SwitchStatus{}
	for _, st := range s.col.Switches() {
		status[st.Switch] = st
	}
	s.mu.Lock()
	live := keysOf(s.members)
	if t.leaving == nil && !s.members[me] {
		live = append(live, me)
	}
	if t.leaving != nil {
		live = slices.DeleteFunc(live, func(id string) bool { return id == me })
	}
	slices.Sort(live)
	type move struct{ sw, from string }
	var claims, takeovers []move
	collect, remote := map[string]bool{}, map[string]bool{}
	for sw := range s.switches {
		own, want := s.owners[sw], owner(live, sw)
		switch {
		case own == me:
			collect[sw] = true
		case want == me && own == "":
			claims = append(claims, move{sw, ""})
			remote[sw] = true
		case want == me:
			collect[sw], remote[sw] = true, true
			if st := status[sw]; st.Synced && st.Reachable {
				takeovers = append(takeovers, move{sw, own})
			}
		default:
			remote[sw] = true
		}
	}
	s.mu.Unlock()

	// Claims and takeovers go out together: a dead replica's share is
	// claimed in one round trip, not one per switch.
	lease := clientv3.WithLease(t.sess.Lease())
	moves := append(claims, takeovers...)
	won := make([]bool, len(moves))
	var wg sync.WaitGroup
	for i, m := range moves {
		wg.Go(func() {
			key := contract.PrefixOwners + m.sw
			cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
			if m.from != "" {
				cmp = clientv3.Compare(clientv3.Value(key), "=", m.from)
			}
			ok, err := t.txn(ctx, cmp, clientv3.OpPut(key, me, lease))
			if err != nil {
				s.log.Warn("telemetry sharing: taking a switch failed", "switch", m.sw, "from", m.from, "err", err)
			}
			won[i] = ok
		})
	}
	wg.Wait()
	for i, m := range moves {
		if won[i] {
			t.owned(m.sw, m.from, collect, remote)
		}
	}

	s.mu.Lock()
	selectNow := !maps.Equal(collect, s.collecting)
	s.collecting = collect
	var local, imported []string
	if !maps.Equal(remote, s.remote) {
		for sw := range s.remote {
			if !remote[sw] {
				local = append(local, sw)
			}
		}
		for sw := range remote {
			if !s.remote[sw] {
				imported = append(imported, sw)
			}
		}
	}
	mine := 0
	for _, o := range s.owners {
		if o == me {
			mine++
		}
	}
	s.m.owned.Set(float64(mine))
	s.m.replicas.Set(float64(len(s.members)))
	changedOwners := !maps.Equal(s.owners, s.told) || s.told == nil
	s.told = maps.Clone(s.owners)
	owners := s.told
	s.remote = remote
	views := make([]planes.SwitchView, 0, len(imported))
	for _, sw := range imported {
		if v, ok := s.views[sw]; ok {
			views = append(views, v)
		}
	}
	s.mu.Unlock()
	if selectNow {
		s.col.Select(collect)
	}
	if changedOwners {
		s.eng.SetOwners(me, owners)
	}
	for _, sw := range local {
		if st, ok := status[sw]; ok {
			s.eng.ObserveSwitch(planes.SwitchReachability{Switch: sw, Reachable: st.Reachable, Synced: st.Synced,
				At: time.Now(), Reason: st.Reason})
		}
	}
	for _, v := range views {
		if s.eng.ImportSwitch(v) {
			s.m.imports.Inc()
		}
	}
	if len(local) > 0 {
		t.publish(ctx, true)
	}
}

// owned records that this replica took sw from from ("" for a free one).
func (t *term) owned(sw, from string, collect, remote map[string]bool) {
	s := t.s
	s.mu.Lock()
	s.owners[sw] = s.cfg.ID
	s.mu.Unlock()
	collect[sw] = true
	delete(remote, sw)
	if from == "" {
		s.m.moves.WithLabelValues(moveClaim).Inc()
		s.log.Info("switch claimed", "switch", sw)
	} else {
		s.m.moves.WithLabelValues(moveTakeover).Inc()
		s.log.Info("switch taken over", "switch", sw, "from", from)
	}
}

// publish writes the views of the switches this replica owns that changed
// (statesOnly: whose link or switch states changed), guarded by ownership.
// With no other replica live nobody reads them, and nothing is written.
func (t *term) publish(ctx context.Context, statesOnly bool) {
	s := t.s
	me := s.cfg.ID
	s.mu.Lock()
	others := len(s.members) > 1 || (len(s.members) == 1 && !s.members[me])
	var mine []string
	for sw, o := range s.owners {
		if o == me && s.switches[sw] && !s.remote[sw] {
			mine = append(mine, sw)
		}
	}
	s.mu.Unlock()
	if !others {
		return
	}
	slices.Sort(mine)
	for _, sw := range mine {
		v, ok := s.eng.ExportSwitch(sw)
		if !ok {
			continue
		}
		full, _ := json.Marshal(ViewDoc{Owner: me, View: v})
		v.LastUpdate, v.Traffic = time.Time{}, nil
		st, _ := json.Marshal(v)
		s.mu.Lock()
		same := bytes.Equal(full, s.written[sw]) || (statesOnly && bytes.Equal(st, s.writtenSt[sw]))
		s.mu.Unlock()
		if same {
			continue
		}
		key := contract.PrefixOwners + sw
		ok, err := t.txn(ctx, clientv3.Compare(clientv3.Value(key), "=", me), clientv3.OpPut(contract.PrefixSwitchViews+sw, string(full)))
		if err != nil || !ok {
			if err != nil {
				s.log.Warn("telemetry sharing: switch view not written", "switch", sw, "err", err)
			}
			continue
		}
		s.mu.Lock()
		s.written[sw], s.writtenSt[sw] = full, st
		s.mu.Unlock()
		s.m.viewWrites.Inc()
	}
}
