package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/events"
	"github.com/multiplane/multiplane/evidence"
	"github.com/multiplane/multiplane/history"
	"github.com/multiplane/multiplane/intents"
	"github.com/multiplane/multiplane/inventory"
	"github.com/multiplane/multiplane/planes"
	"github.com/multiplane/multiplane/policy"
	"github.com/multiplane/multiplane/policy/publish"
	"github.com/multiplane/multiplane/shard"
	"github.com/multiplane/multiplane/store"
	"github.com/multiplane/multiplane/telemetry"
)

type fabricDeps struct {
	db        *store.DB
	inv       *inventory.Inventory
	engine    *planes.Engine
	events    *events.Store
	intents   *intents.Store
	publisher *publish.Publisher
	collector *telemetry.Collector
	sharder   *shard.Sharder // nil: every replica streams every switch
	evidence  *evidence.Watcher
	history   *history.Recorder
	policy    policy.Config
	// onTopology, if set, is called (it must not block) when the live view
	// moves to a new topology revision.
	onTopology func()
}

// fabricView keeps the live components (health engine, telemetry
// collector, publisher) on the current topology and intents.
type fabricView struct {
	fabricDeps
	logger *slog.Logger

	mu       sync.Mutex
	revision int64
	// loaded is the topology and intents last read from PostgreSQL: while
	// it is away, computations go on from them (neither can change
	// without it), so health changes are still published.
	loaded     policy.Input
	storeError bool // the last read failed (logged once per outage)
}

// newFabricView loads the current topology into the engine, restores the
// states remembered in the event history and applies the drains.
func newFabricView(ctx context.Context, d fabricDeps, logger *slog.Logger) (*fabricView, error) {
	f := &fabricView{fabricDeps: d, logger: logger}
	snap, err := d.inv.Current(ctx)
	if err != nil {
		return nil, fmt.Errorf("fabricd: %w", err)
	}
	f.apply(snap)
	last, err := d.events.LastStates(ctx)
	if err != nil {
		return nil, fmt.Errorf("fabricd: %w", err)
	}
	d.engine.Restore(last)
	if err := f.syncDrains(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

// apply moves the live components to snap if it is newer.
func (f *fabricView) apply(snap *inventory.Snapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if snap.Revision <= f.revision && f.revision != 0 {
		return
	}
	f.revision = snap.Revision
	f.engine.SetTopology(snap.Topology, snap.Links)
	f.collector.Reconcile(snap.Topology)
	if f.sharder != nil {
		names := make([]string, len(snap.Topology.Switches))
		for i, sw := range snap.Topology.Switches {
			names[i] = sw.Name
		}
		f.sharder.SetSwitches(names)
	}
	f.evidence.SetTopology(snap.Links)
	f.history.SetTopology(snap.Topology, snap.Links)
	f.publisher.Trigger()
	if f.onTopology != nil {
		f.onTopology()
	}
	f.logger.Info("live view on topology revision", "revision", snap.Revision)
}

// syncDrains shows plane drains as the draining state.
func (f *fabricView) syncDrains(ctx context.Context) error {
	ds, err := f.intents.Drains(ctx, false)
	if err != nil {
		return fmt.Errorf("fabricd: %w", err)
	}
	drained := map[string]bool{}
	for _, d := range ds {
		if d.Kind == policy.DrainPlane {
			drained[d.Target] = true
		}
	}
	f.engine.SetDrained(drained)
	return nil
}

// intentsChanged is called after an operator changed drains or rate
// classes through this replica: it applies them and tells the others.
func (f *fabricView) intentsChanged(ctx context.Context) {
	f.onChange(ctx, "intents")
	if err := f.db.NotifyChange(ctx, "intents"); err != nil {
		f.logger.Warn("other replicas not told of the change", "err", err)
	}
}

// topologyChanged is called after a PUT of the topology through this replica.
func (f *fabricView) topologyChanged(snap *inventory.Snapshot) {
	f.apply(snap)
	if err := f.db.NotifyChange(context.Background(), "topology"); err != nil {
		f.logger.Warn("other replicas not told of the change", "err", err)
	}
}

// onChange applies a change made through any replica and publishes it.
func (f *fabricView) onChange(ctx context.Context, what string) {
	f.refresh(ctx, what)
	f.publisher.Trigger()
}

// refresh re-reads what changed: the topology (when what says so) and
// the drains.
func (f *fabricView) refresh(ctx context.Context, what string) {
	if what == "topology" {
		if snap, err := f.inv.Current(ctx); err == nil {
			f.apply(snap)
		}
	}
	if err := f.syncDrains(ctx); err != nil {
		f.logger.Error("drains not applied to plane states", "err", err)
	}
}

// listen follows changes made through other replicas.
func (f *fabricView) listen(ctx context.Context) {
	f.db.ListenChanges(ctx, func(what string) { f.onChange(ctx, what) })
}

// policyInput gathers topology, health and intents; with PostgreSQL
// away, the topology and intents last read from it.
func (f *fabricView) policyInput(ctx context.Context) (policy.Input, error) {
	rctx, cancel := context.WithTimeout(ctx, storeReadTimeout)
	defer cancel()
	snap, err := f.inv.Current(rctx)
	var in policy.Intents
	if err == nil {
		in, err = f.intents.Load(rctx)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		if f.loaded.Topology == nil {
			return policy.Input{}, err
		}
		if !f.storeError {
			f.logger.Warn("PostgreSQL unavailable: computing from the topology and intents last read", "err", err)
			f.storeError = true
		}
		out := f.loaded
		out.Health = f.engine
		return out, nil
	}
	if f.storeError {
		f.logger.Info("PostgreSQL available again: computing from what it holds")
		f.storeError = false
	}
	f.loaded = policy.Input{Topology: snap.Topology, Intents: in}
	return policy.Input{Topology: snap.Topology, Health: f.engine, Intents: in}, nil
}

// storeReadTimeout bounds the reads of a computation: PostgreSQL that
// does not answer must not hold publication back.
const storeReadTimeout = time.Second

// compute is the publisher's computation.
func (f *fabricView) compute(ctx context.Context) (publish.Input, error) {
	in, err := f.policyInput(ctx)
	if err != nil {
		return publish.Input{}, err
	}
	f.mu.Lock()
	rev := f.revision
	f.mu.Unlock()
	return publish.Input{Output: policy.Compute(in, f.policy), TopologyRevision: rev}, nil
}

// planesNow is the planes' statuses as they are now, with the intents
// of the last computation: what the publisher writes at once when a
// plane goes down.
func (f *fabricView) planesNow() ([]contract.PlaneStatus, bool) {
	f.mu.Lock()
	in := f.loaded
	f.mu.Unlock()
	if in.Topology == nil {
		return nil, false
	}
	return policy.Planes(in.Topology, planes.Snapshot(f.engine), in.Intents.Drains), true
}

// triggerOnChanges republishes on every health transition: at once when
// a plane goes down, otherwise once a burst of changes ends
// (publish.Config.HoldQuiet). A switch going down is no reason to hurry: a
// plane fails switch by switch, and publishing the first switch's links
// down would write every endpoint behind it, then again once the plane is
// down and covers them.
func (f *fabricView) triggerOnChanges(ctx context.Context, sub *planes.Subscription) {
	var changed func()
	if f.sharder != nil {
		changed = f.sharder.Changed
	}
	triggerOnChanges(ctx, sub, f.engine, f.publisher, changed)
}

// publishTriggers is what triggerOnChanges asks of the publisher.
type publishTriggers interface {
	TriggerNow()
	TriggerHealth()
	TriggerRecovery()
}

// triggerOnChanges is fabricView.triggerOnChanges; changed, if set, is
// called after every event.
func triggerOnChanges(ctx context.Context, sub *planes.Subscription, engine *planes.Engine, pub publishTriggers, changed func()) {
	defer sub.Close()
	downs := engine.PlaneDowns()
	var dropped uint64
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-sub.C:
			if !ok {
				return
			}
			// A plane went down, whether its event is this one, still
			// queued behind link events, or dropped: the engine's count
			// says so without its lock. (Reading each plane's state under
			// the lock, on every event while events were dropped, held
			// this loop behind the engine's batches: the publication
			// started 540 ms after the plane went down, at 16,000
			// endpoints.)
			failing := ev.SubjectKind == planes.SubjectPlane && ev.Kind == planes.EventStateChange &&
				ev.To == string(planes.PlaneDown) // also when it went down before downs was read
			if n := engine.PlaneDowns(); n != downs {
				downs, failing = n, true
			}
			// Events lost in a burst may have held any failure: what
			// came is no longer all recoveries.
			lost := false
			if d := sub.Dropped(); d != dropped {
				for range d - dropped { // they count towards the burst
					pub.TriggerHealth()
				}
				dropped, lost = d, true
			}
			switch {
			case failing:
				pub.TriggerNow()
			case recovery(ev) && !lost:
				pub.TriggerRecovery()
			default:
				pub.TriggerHealth()
			}
			if changed != nil {
				changed()
			}
		}
	}
}

// severity orders the health states of links, switches and planes
// (planes.LinkState and planes.PlaneState share "degraded" and "down"):
// recovering is moving down it.
var severity = map[string]int{
	string(planes.LinkUp): 0, string(planes.PlaneHealthy): 0,
	string(planes.PlaneDegraded): 1, string(planes.PlaneDown): 2,
}

// recovery reports whether ev is a link, switch or plane getting
// healthier (publish.Publisher.TriggerRecovery); anything else, draining
// included, is not.
func recovery(ev planes.Event) bool {
	from, okFrom := severity[ev.From]
	to, okTo := severity[ev.To]
	return ev.Kind == planes.EventStateChange && okFrom && okTo && to < from
}

// follow re-reads topology and drains now and then, in case a change
// notification was missed while disconnected, and asks for a computation
// that joins any burst of health changes rather than ending it: every
// 30 s one ended a plane's failure mid-way at 16,000 endpoints and wrote
// 3,562 documents, then wrote them back.
func (f *fabricView) follow(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.refresh(ctx, "topology")
			f.publisher.Recheck()
		}
	}
}
