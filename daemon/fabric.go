package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/multiplane/multiplane/events"
	"github.com/multiplane/multiplane/inventory"
	"github.com/multiplane/multiplane/planes"
)

// fabricView keeps the live components (health engine, and later the
// telemetry collector) on the current topology revision.
type fabricView struct {
	inv    *inventory.Inventory
	engine *planes.Engine
	logger *slog.Logger

	mu       sync.Mutex
	revision int64
}

// newFabricView loads the current topology into the engine and restores
// the states remembered in the event history.
func newFabricView(ctx context.Context, inv *inventory.Inventory, engine *planes.Engine, evs *events.Store, logger *slog.Logger) (*fabricView, error) {
	f := &fabricView{inv: inv, engine: engine, logger: logger}
	snap, err := inv.Current(ctx)
	if err != nil {
		return nil, fmt.Errorf("fabricd: %w", err)
	}
	f.apply(snap)
	last, err := evs.LastStates(ctx)
	if err != nil {
		return nil, fmt.Errorf("fabricd: %w", err)
	}
	engine.Restore(last)
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
	f.logger.Info("live view on topology revision", "revision", snap.Revision)
}

// follow picks up topology changes made through another fabricd replica.
func (f *fabricView) follow(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			snap, err := f.inv.Current(ctx)
			if err != nil {
				if ctx.Err() == nil {
					f.logger.Warn("topology refresh failed", "err", err)
				}
				continue
			}
			f.apply(snap)
		}
	}
}
