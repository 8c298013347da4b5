// Package shard shares the collection of switch telemetry among fabricd
// replicas through etcd, with no coordinator of its own.
//
// Each replica holds an etcd lease and registers under it
// (contract.PrefixReplicas). A switch is owned by one replica: its key
// under contract.PrefixOwners holds the owner's ID, under the owner's
// lease, so a replica that dies loses its switches when its lease expires.
// Which replica should own a switch is rendezvous hashing over the live
// replicas, which every replica computes alike. A free switch is claimed
// by that replica; a switch owned by another is taken over make-before-
// break: the new owner streams it first and takes the key (a transaction
// on the old owner's ID) only once its stream is synced; the old owner
// stops streaming when it sees the key go. A replica that stops hands its
// switches over the same way before it lets its lease go (Handover).
//
// The owner's health engine judges its switches and writes its view of
// each (planes.SwitchView) under contract.PrefixSwitchViews, on every
// transition and every PublishEvery; the other replicas import these views,
// so every replica shows the whole fabric and its policy leader computes
// from it.
package shard

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"time"

	"github.com/multiplane/multiplane/planes"
	"github.com/multiplane/multiplane/telemetry"
)

// Engine is the health engine's side of sharing (planes.Engine).
type Engine interface {
	SetOwners(self string, owners map[string]string)
	ImportSwitch(v planes.SwitchView) bool
	ExportSwitch(name string) (planes.SwitchView, bool)
	ObserveSwitch(r planes.SwitchReachability)
}

// Collector is the telemetry collector's side (telemetry.Collector).
type Collector interface {
	Select(names map[string]bool)
	Switches() []telemetry.SwitchStatus
}

// Config configures a Sharder.
type Config struct {
	// ID names the replica; unique among the replicas.
	ID string
	// TTL is the lease, in seconds: a dead replica's switches are re-owned
	// after about this long.
	TTL int
	// PublishEvery is how often an owner rewrites its switches' views
	// (their traffic figures) besides on every transition.
	PublishEvery time.Duration
	// Poll is how often collection is reconciled with ownership (and a
	// handover's stream checked for sync).
	Poll time.Duration
	// HandoverTimeout bounds how long Handover waits for the other
	// replicas to take this one's switches.
	HandoverTimeout time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{TTL: 5, PublishEvery: time.Second, Poll: 100 * time.Millisecond, HandoverTimeout: 10 * time.Second}
}

// ErrConfig reports an invalid configuration.
var ErrConfig = errors.New("shard: invalid config")

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.ID == "":
		return fmt.Errorf("%w: empty replica ID", ErrConfig)
	case c.TTL < 1 || c.TTL > 600:
		return fmt.Errorf("%w: TTL %d s out of 1..600", ErrConfig, c.TTL)
	case c.PublishEvery < 10*time.Millisecond || c.PublishEvery > time.Minute:
		return fmt.Errorf("%w: publish interval %v out of 10ms..1m", ErrConfig, c.PublishEvery)
	case c.Poll < time.Millisecond || c.Poll > 10*time.Second:
		return fmt.Errorf("%w: poll interval %v out of 1ms..10s", ErrConfig, c.Poll)
	case c.HandoverTimeout < 0:
		return fmt.Errorf("%w: negative handover timeout", ErrConfig)
	}
	return nil
}

// owner returns the replica of live (IDs) that should own sw: rendezvous
// (highest random weight) hashing, so a replica joining or leaving moves
// only its own share of the switches.
func owner(live []string, sw string) string {
	best, bestW := "", uint64(0)
	for _, id := range live {
		h := fnv.New64a()
		h.Write([]byte(id))
		h.Write([]byte{0})
		h.Write([]byte(sw))
		if w := mix(h.Sum64()); best == "" || w > bestW || (w == bestW && id < best) {
			best, bestW = id, w
		}
	}
	return best
}

// mix is splitmix64's finalizer: FNV alone spreads names that differ in
// their last character badly (one of 3 replicas got no switch of 64).
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// Status is the sharing state of one switch as a replica sees it.
type Status struct {
	Switch string `json:"switch"`
	Owner  string `json:"owner"` // "" while free
	// Collecting: this replica streams the switch (its owner, or taking
	// it over).
	Collecting bool `json:"collecting"`
}

func keysOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range maps.Keys(m) {
		out = append(out, k)
	}
	return out
}

// logger returns l or a discarding one.
func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
