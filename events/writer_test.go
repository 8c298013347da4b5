package events_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/multiplane/multiplane/events"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/planes"
	"github.com/multiplane/multiplane/store/storetest"
)

func numbered(from, n int) []planes.Event {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	evs := make([]planes.Event, n)
	for i := range evs {
		evs[i] = planes.Event{At: t0.Add(time.Duration(from+i) * time.Millisecond), SubjectKind: planes.SubjectLink,
			Subject: fmt.Sprintf("s0:E%d", from+i), Kind: planes.EventStateChange, From: "up", To: "down"}
	}
	return evs
}

// metric reads one of the writer's series.
func metric(t *testing.T, w *events.Writer, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(w.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// history splits what the store holds into transitions and gap counts.
func history(t *testing.T, store *events.Store) (transitions int, gaps []float64) {
	t.Helper()
	var after int64
	for {
		page, err := store.List(context.Background(), events.Query{AfterID: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return
		}
		for _, e := range page {
			if e.Kind == planes.EventHistoryGap {
				if e.SubjectKind != planes.SubjectHistory {
					t.Fatalf("gap event %+v", e)
				}
				lost, _ := e.Evidence["lost"].(float64)
				gaps = append(gaps, lost)
			} else {
				transitions++
			}
		}
		after = page[len(page)-1].ID
	}
}

func startWriter(t *testing.T, w *events.Writer, sub *planes.Subscription) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx, sub); close(done) }()
	t.Cleanup(func() { cancel(); <-done; sub.Close() })
}

// Drops the subscription counted become a history_gap event with their
// count, and the metric.
func TestWriterRecordsGap(t *testing.T) {
	db := storetest.New(t)
	store := events.New(db.Pool())
	bus := planes.NewBus()
	sub := bus.Subscribe(2)
	bus.Publish(numbered(0, 10)...) // nobody reads yet: 8 dropped
	w := events.NewWriter(store, testenv.Logger(t))
	startWriter(t, w, sub)

	testutil.WaitFor(t, 10*time.Second, "2 transitions and a gap in the history", func() bool {
		n, gaps := history(t, store)
		return n == 2 && len(gaps) == 1
	})
	if _, gaps := history(t, store); gaps[0] != 8 {
		t.Fatalf("gap records %v lost, want 8", gaps[0])
	}
	if got := metric(t, w, "multiplane_events_lost_total"); got != 8 {
		t.Fatalf("multiplane_events_lost_total = %v, want 8", got)
	}
}

// While the database blocks the writer, a queued subscription keeps every
// event and the history ends complete; a plain one loses some, and the
// history says exactly how many.
func TestWriterWhileDatabaseBlocked(t *testing.T) {
	const total = 5000
	for _, tc := range []struct {
		name      string
		subscribe func(*planes.Bus) *planes.Subscription
		lossless  bool
	}{
		{"queued subscription", func(b *planes.Bus) *planes.Subscription { return b.SubscribeQueued(16, 100_000) }, true},
		{"plain subscription", func(b *planes.Bus) *planes.Subscription { return b.Subscribe(16) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := storetest.New(t)
			ctx := context.Background()
			store := events.New(db.Pool())
			bus := planes.NewBus()
			sub := tc.subscribe(bus)

			// Another session holds the events table: appends wait.
			tx, err := db.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, `LOCK TABLE events IN ACCESS EXCLUSIVE MODE`); err != nil {
				t.Fatal(err)
			}
			w := events.NewWriter(store, testenv.Logger(t))
			w.MaxBatch, w.MaxPending = 50, 200
			startWriter(t, w, sub)
			for i := 0; i < total; i += 100 {
				bus.Publish(numbered(i, 100)...)
			}
			testutil.WaitFor(t, 10*time.Second, "the writer to wait on the lock", func() bool {
				var n int
				db.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'`).Scan(&n)
				return n > 0
			})
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}

			testutil.WaitFor(t, 20*time.Second, "every event written or accounted for", func() bool {
				n, gaps := history(t, store)
				lost := 0.0
				for _, g := range gaps {
					lost += g
				}
				return float64(n)+lost == total
			})
			n, gaps := history(t, store)
			lost := metric(t, w, "multiplane_events_lost_total")
			t.Logf("%d of %d written, gaps %v, dropped %d", n, total, gaps, sub.Dropped())
			if tc.lossless && (n != total || len(gaps) != 0 || lost != 0) {
				t.Fatalf("queued subscription: %d of %d written, gaps %v, lost_total %v; want none lost", n, total, gaps, lost)
			}
			if !tc.lossless && (len(gaps) == 0 || lost != float64(total-n)) {
				t.Fatalf("plain subscription: %d written, gaps %v, lost_total %v; want the %d lost recorded", n, gaps, lost, total-n)
			}
		})
	}
}

// A replica taking the history over records what changed while none
// recorded, from the engine's current states, so every subject's changes
// chain; a change the history already holds is not recorded twice.
func TestWriterCatchesUpOnTakingOver(t *testing.T) {
	db := storetest.New(t)
	store := events.New(db.Pool())
	ctx := context.Background()
	t0 := time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)
	// The old leader recorded p1 going down, then died; meanwhile p1 came
	// back, link s0:E1 went down and p2 went down.
	if err := store.Append(ctx, []planes.Event{{At: t0, SubjectKind: planes.SubjectPlane, Subject: "p1",
		Kind: planes.EventStateChange, From: "healthy", To: "down"}}); err != nil {
		t.Fatal(err)
	}
	current := []planes.Event{
		{SubjectKind: planes.SubjectPlane, Subject: "p1", Kind: planes.EventStateChange, To: "healthy"},
		{SubjectKind: planes.SubjectPlane, Subject: "p2", Kind: planes.EventStateChange, To: "down"},
		{SubjectKind: planes.SubjectPlane, Subject: "p3", Kind: planes.EventStateChange, To: "healthy"},
		{SubjectKind: planes.SubjectLink, Subject: "s0:E1", Kind: planes.EventStateChange, To: "down"},
		{SubjectKind: planes.SubjectLink, Subject: "s0:E2", Kind: planes.EventStateChange, To: "up"},
	}
	var leader atomic.Bool
	bus := planes.NewBus()
	sub := bus.Subscribe(100)
	w := events.NewWriter(store, testenv.Logger(t))
	w.Writes, w.States = leader.Load, func() []planes.Event { return current }
	startWriter(t, w, sub)
	// While another replica leads, nothing is recorded.
	bus.Publish(planes.Event{At: t0.Add(time.Second), SubjectKind: planes.SubjectPlane, Subject: "p3", Kind: planes.EventStateChange, From: "healthy", To: "degraded"})
	time.Sleep(300 * time.Millisecond) // the writer's flush interval is 100 ms: give it the chance to be wrong
	if n, _ := history(t, store); n != 1 {
		t.Fatalf("%d events recorded while not leading, want the 1 appended", n)
	}

	leader.Store(true)
	// Queued at the takeover: already in the current states (skipped), and
	// one that is news.
	bus.Publish(
		planes.Event{At: t0.Add(2 * time.Second), SubjectKind: planes.SubjectPlane, Subject: "p2", Kind: planes.EventStateChange, From: "healthy", To: "down"},
		planes.Event{At: t0.Add(3 * time.Second), SubjectKind: planes.SubjectLink, Subject: "s0:E2", Kind: planes.EventStateChange, From: "up", To: "down"})
	want := []string{"plane p1 down->healthy", "plane p2 healthy->down", "link s0:E1 up->down", "link s0:E2 up->down"}
	var got []string
	testutil.WaitFor(t, 10*time.Second, "the catch-up and the news recorded", func() bool {
		evs, err := store.List(ctx, events.Query{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, e := range evs[1:] {
			got = append(got, fmt.Sprintf("%s %s %s->%s", e.SubjectKind, e.Subject, e.From, e.To))
		}
		return len(got) >= len(want)
	})
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("history after the takeover:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := metric(t, w, "multiplane_events_caught_up_total"); n != 3 {
		t.Errorf("multiplane_events_caught_up_total = %v, want 3", n)
	}
}

// A deposed leader's appends are refused once its successor has written,
// and nothing of them lands; its writer drops what it held.
func TestHistoryRefusesAStaleWriter(t *testing.T) {
	db := storetest.New(t)
	store := events.New(db.Pool())
	ctx := context.Background()
	if err := store.AppendAs(ctx, numbered(0, 2), 5, false); err != nil {
		t.Fatal(err)
	}
	if err := store.AppendAs(ctx, numbered(2, 1), 9, false); err != nil {
		t.Fatal(err)
	}
	if err := store.AppendAs(ctx, numbered(3, 4), 5, false); !errors.Is(err, events.ErrStaleWriter) {
		t.Fatalf("append of term 5 after term 9: %v, want ErrStaleWriter", err)
	}
	if n, _ := history(t, store); n != 3 {
		t.Fatalf("%d events in the history, want the 3 of accepted appends", n)
	}
	if err := store.AppendAs(ctx, numbered(7, 1), 9, false); err != nil {
		t.Fatalf("the current term appending again: %v", err)
	}
	// A leader of a new etcd cluster (revisions start again) takes over.
	if err := store.AppendAs(ctx, numbered(8, 1), 2, true); err != nil {
		t.Fatalf("a leading writer of a lower term: %v", err)
	}
	if err := store.AppendAs(ctx, numbered(9, 1), 1, false); !errors.Is(err, events.ErrStaleWriter) {
		t.Fatalf("term 1 after the leading term 2: %v, want ErrStaleWriter", err)
	}

	// The deposed leader's writer drops what it held.
	bus := planes.NewBus()
	sub := bus.Subscribe(100)
	w := events.NewWriter(store, testenv.Logger(t))
	w.Term = func() (int64, bool) { return 1, false }
	startWriter(t, w, sub)
	bus.Publish(numbered(10, 3)...)
	testutil.WaitFor(t, 10*time.Second, "the stale events dropped", func() bool {
		return metric(t, w, "multiplane_events_stale_dropped_total") == 3
	})
	if n, _ := history(t, store); n != 5 {
		t.Fatalf("%d events in the history after the stale writer, want 5", n)
	}
}

// A writer taking the history over computes its catch-up from what it
// read; the writer it replaces may append in between. Its changes to a
// state the history already ends in are dropped, its caught-up changes
// start where the history ends, and a change from a state the history
// does not end in follows a caught-up change to it: every subject's
// changes still chain.
func TestTakingOverChainsOnWhatTheHistoryHoldsAtAppend(t *testing.T) {
	db := storetest.New(t)
	store := events.New(db.Pool())
	ctx := context.Background()
	at := time.Date(2026, 12, 7, 19, 0, 0, 0, time.UTC)
	change := func(kind, subject, from, to string, caughtUp bool) planes.Event {
		e := planes.Event{At: at, SubjectKind: kind, Subject: subject, Kind: planes.EventStateChange, From: from, To: to}
		if caughtUp {
			e.Evidence = map[string]any{"caught_up": "recorded on taking it over"}
		}
		return e
	}
	// The old writer, after the new one read the history.
	if err := store.AppendAs(ctx, []planes.Event{
		change(planes.SubjectLink, "sw1:eth1", "up", "down", false),
		change(planes.SubjectLink, "sw1:eth2", "up", "degraded", false),
		change(planes.SubjectPlane, "p0", "healthy", "down", false),
		change(planes.SubjectPlane, "p1", "healthy", "down", false),
	}, 5, false); err != nil {
		t.Fatal(err)
	}
	// The new writer's catch-up and a change its own engine saw.
	if err := store.AppendAs(ctx, []planes.Event{
		change(planes.SubjectPlane, "p0", "healthy", "down", true),
		change(planes.SubjectLink, "sw1:eth1", "up", "down", true),
		change(planes.SubjectLink, "sw1:eth2", "up", "down", true),
		change(planes.SubjectLink, "sw1:eth3", "up", "down", true),
		change(planes.SubjectLink, "sw1:eth1", "up", "down", false),
		change(planes.SubjectPlane, "p0", "down", "healthy", false),
		change(planes.SubjectPlane, "p1", "healthy", "degraded", false),
	}, 9, false); err != nil {
		t.Fatal(err)
	}
	page, err := store.List(ctx, events.Query{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	last := map[string]string{}
	for _, e := range page {
		k := e.SubjectKind + " " + e.Subject
		got = append(got, fmt.Sprintf("%s %s->%s", e.Subject, e.From, e.To))
		if prev, ok := last[k]; ok && prev != e.From {
			t.Errorf("%s: %s->%s follows ->%s", k, e.From, e.To, prev)
		}
		last[k] = e.To
	}
	want := []string{"sw1:eth1 up->down", "sw1:eth2 up->degraded", "p0 healthy->down", "p1 healthy->down",
		"sw1:eth2 degraded->down", "sw1:eth3 up->down", "p0 down->healthy", "p1 down->healthy", "p1 healthy->degraded"}
	if !slices.Equal(got, want) {
		t.Fatalf("history:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A deposed leader that still believes it leads (its session has not
// expired yet) is refused once its successor wrote; a leader refused for
// TakeOverAfter (a new etcd cluster: terms start again) takes over.
func TestLeadingWriterOfAnOlderTermTakesOverOnlyAfterAWhile(t *testing.T) {
	db := storetest.New(t)
	store := events.New(db.Pool())
	ctx := context.Background()
	if err := store.AppendAs(ctx, numbered(0, 1), 9, false); err != nil { // the successor wrote
		t.Fatal(err)
	}
	bus := planes.NewBus()
	sub := bus.Subscribe(100)
	w := events.NewWriter(store, testenv.Logger(t))
	w.Term = func() (int64, bool) { return 5, true }
	w.TakeOverAfter = 2 * time.Second
	startWriter(t, w, sub)
	start := time.Now()
	bus.Publish(numbered(1, 3)...)
	testutil.WaitFor(t, 10*time.Second, "the deposed leader's events dropped", func() bool {
		return metric(t, w, "multiplane_events_stale_dropped_total") == 3
	})
	if n, _ := history(t, store); n != 1 {
		t.Fatalf("%d events in the history after the deposed leader's append, want 1", n)
	}
	for time.Since(start) < w.TakeOverAfter+200*time.Millisecond {
		time.Sleep(100 * time.Millisecond)
	}
	bus.Publish(numbered(4, 2)...)
	testutil.WaitFor(t, 10*time.Second, "a leader refused for TakeOverAfter takes over", func() bool {
		n, _ := history(t, store)
		return n == 3
	})
}
