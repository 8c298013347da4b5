package agent

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/kv/kvtest"
)

// The last-known-good file is written before anything claims the
// generation applied: while it is being saved, neither the status nor
// OnApplied nor the applies counter has seen the generation.
func TestPersistsBeforeReportingApplied(t *testing.T) {
	s := kvtest.New(t)
	cli := s.Client
	dir := t.TempDir()
	var reported atomic.Uint64 // last generation OnApplied was called with
	cfg := Config{Endpoint: "host-a", Client: cli, StateDir: dir, Planes: 4,
		OnApplied: func(gen uint64, _ time.Time) { reported.Store(gen) }}
	a := newAgent(t, cfg, &recorder{})
	type seen struct{ gen, status, onApplied, applies uint64 }
	saves := make(chan seen, 10)
	a.save = func(path string, d contract.EndpointDoc, now time.Time) error {
		saves <- seen{d.Generation, a.Status().AppliedGeneration, reported.Load(), a.ctr.appliesEtcd.Load()}
		return saveLKG(path, d, now)
	}
	putDoc(t, cli, doc("host-a", 1))
	putGen(t, cli, 1)
	start(t, a)
	for i, gen := range []uint64{1, 2} {
		if gen > 1 {
			putDoc(t, cli, doc("host-a", gen))
			putGen(t, cli, gen)
		}
		var got seen
		select {
		case got = <-saves:
		case <-time.After(wait):
			t.Fatalf("generation %d never saved", gen)
		}
		if want := (seen{gen, gen - 1, gen - 1, uint64(i)}); got != want {
			t.Fatalf("while saving generation %d: status generation %d, OnApplied %d, applies %d; want %d, %d, %d (nothing ahead of the file)",
				gen, got.status, got.onApplied, got.applies, want.status, want.onApplied, want.applies)
		}
		testutil.WaitFor(t, wait, "the saved generation reported", func() bool {
			st, _, ok := getStatus(t, cli, "host-a")
			return ok && st.AppliedGeneration == gen && reported.Load() == gen
		})
	}
}

// A generation whose last-known-good file cannot be written is in the
// transport but is not reported as applied (a crash would lose it); the
// status says why, and once the disk accepts the file the agent saves and
// reports it without a new document from etcd.
func TestSaveFailureIsNotReportedAsApplied(t *testing.T) {
	s := kvtest.New(t)
	cli := s.Client
	dir := t.TempDir()
	rec := &recorder{}
	a := newAgent(t, Config{Endpoint: "host-a", Client: cli, StateDir: dir, Planes: 4}, rec)
	var failing atomic.Bool
	a.save = func(path string, d contract.EndpointDoc, now time.Time) error {
		if failing.Load() {
			return errors.New("disk full")
		}
		return saveLKG(path, d, now)
	}
	putDoc(t, cli, doc("host-a", 1))
	putGen(t, cli, 1)
	start(t, a)
	testutil.WaitFor(t, wait, "generation 1 reported", func() bool {
		st, _, ok := getStatus(t, cli, "host-a")
		return ok && st.AppliedGeneration == 1
	})

	failing.Store(true)
	putDoc(t, cli, doc("host-a", 2))
	putGen(t, cli, 2)
	var st contract.StatusDoc
	testutil.WaitFor(t, wait, "the save error in the status in etcd", func() bool {
		var ok bool
		st, _, ok = getStatus(t, cli, "host-a")
		return ok && strings.Contains(strings.Join(st.Errors, ";"), "disk full")
	})
	if rec.last() != 2 {
		t.Fatalf("transport has generation %d, want 2 (applied, only not saved)", rec.last())
	}
	if st.AppliedGeneration != 1 || a.Status().AppliedGeneration != 1 {
		t.Fatalf("status in etcd claims generation %d, in memory %d, whose file was not written; want 1", st.AppliedGeneration, a.Status().AppliedGeneration)
	}
	if d, ok, err := loadLKG(LKGPath(dir, "host-a"), "host-a", 4); err != nil || !ok || d.Generation != 1 {
		t.Fatalf("last-known-good file: generation %d, %v, %v; want 1", d.Generation, ok, err)
	}

	failing.Store(false) // no new write to etcd: the agent retries by itself
	testutil.WaitFor(t, wait, "generation 2 saved and reported", func() bool {
		st, _, ok := getStatus(t, cli, "host-a")
		return ok && st.AppliedGeneration == 2 && len(st.Errors) == 0
	})
	if d, ok, err := loadLKG(LKGPath(dir, "host-a"), "host-a", 4); err != nil || !ok || d.Generation != 2 {
		t.Fatalf("last-known-good file: generation %d, %v, %v; want 2", d.Generation, ok, err)
	}
}
