package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/multiplane/multiplane/events"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/planes"
	"github.com/multiplane/multiplane/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func TestWriterPersistsAndStoreLists(t *testing.T) {
	db := storetest.New(t)
	store := events.New(db.Pool())
	bus := planes.NewBus()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	sub := bus.Subscribe(100)
	go func() { events.NewWriter(store, testenv.Logger(t)).Run(ctx, sub); close(done) }()

	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	bus.Publish(
		planes.Event{At: t0, SubjectKind: "link", Subject: "s0:E1", Kind: planes.EventStateChange, From: "up", To: "down", Reason: "oper-status DOWN", Evidence: map[string]any{"switch": "s0"}},
		planes.Event{At: t0.Add(time.Second), SubjectKind: "plane", Subject: "p0", Kind: planes.EventStateChange, From: "healthy", To: "degraded"},
		planes.Event{At: t0.Add(2 * time.Second), SubjectKind: "link", Subject: "s0:E1", Kind: planes.EventStateChange, From: "down", To: "up"},
	)
	cancel() // the writer must flush what it holds
	<-done

	all, err := store.List(context.Background(), events.Query{})
	if err != nil || len(all) != 3 {
		t.Fatalf("List = %d events, %v", len(all), err)
	}
	if all[0].Evidence["switch"] != "s0" || all[0].Reason != "oper-status DOWN" || !all[0].At.Equal(t0) {
		t.Fatalf("first event = %+v", all[0])
	}
	tests := []struct {
		q    events.Query
		want int
	}{
		{events.Query{Subject: "s0:E1"}, 2},
		{events.Query{SubjectKind: "plane"}, 1},
		{events.Query{Since: t0.Add(time.Second)}, 2},
		{events.Query{AfterID: all[0].ID}, 2},
		{events.Query{Limit: 1}, 1},
	}
	for _, tc := range tests {
		got, err := store.List(context.Background(), tc.q)
		if err != nil || len(got) != tc.want {
			t.Errorf("List(%+v) = %d, %v; want %d", tc.q, len(got), err, tc.want)
		}
	}
	if id, err := store.LastID(context.Background()); err != nil || id != all[2].ID {
		t.Fatalf("LastID = %d, %v; want the newest, %d", id, err, all[2].ID)
	}
	last, err := store.LastStates(context.Background())
	if err != nil || len(last) != 2 {
		t.Fatalf("LastStates = %v, %v", last, err)
	}
	for _, e := range last {
		if e.Subject == "s0:E1" && e.To != "up" {
			t.Fatalf("last state of s0:E1 = %s, want up", e.To)
		}
	}
	if _, err := db.Pool().Exec(context.Background(), `DELETE FROM events`); err == nil {
		t.Fatal("events could be deleted")
	}
}
