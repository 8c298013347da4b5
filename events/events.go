// Package events keeps the fabric's history in the append-only events
// table: the Writer copies health transitions from the in-process bus into
// PostgreSQL in batches, and Store lists them back and recalls the last
// state of every subject after a restart.
//
//	store := events.New(pool)
//	w := events.NewWriter(store, logger)
//	reg.MustRegister(w.Collector())
//	go w.Run(ctx, bus.SubscribeQueued(events.SubscriptionBuffer, events.SubscriptionLimit))
//	page, err := store.List(ctx, events.Query{Subject: "p0", Limit: 100})
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/multiplane/multiplane/planes"
)

// Store reads and appends events.
type Store struct{ pool *pgxpool.Pool }

// New returns a store over a migrated database.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Append writes events in one statement batch.
func (s *Store) Append(ctx context.Context, evs []planes.Event) error {
	if len(evs) == 0 {
		return nil
	}
	rows, err := rowsOf(evs)
	if err != nil {
		return err
	}
	_, err = s.pool.CopyFrom(ctx, pgx.Identifier{"events"}, eventColumns, pgx.CopyFromRows(rows))
	if err != nil {
		return fmt.Errorf("events: append: %w", err)
	}
	return nil
}

// ErrStaleWriter: a writer of a later term has written the history.
var ErrStaleWriter = errors.New("events: a later writer records the history")

// AppendAs appends evs as the writer of term (a policy leadership's
// election revision): refused with ErrStaleWriter, writing nothing, once a
// later term has written; the first append of a later term takes over.
// A writer that leads now (force) takes over whatever term is recorded: a
// new etcd cluster starts its revisions again.
func (s *Store) AppendAs(ctx context.Context, evs []planes.Event, term int64, force bool) error {
	if len(evs) == 0 {
		return nil
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var current int64
		err := tx.QueryRow(ctx, `INSERT INTO history_writer (id, term) VALUES (true, $1)
			ON CONFLICT (id) DO UPDATE SET term = excluded.term WHERE history_writer.term <= excluded.term OR $2
			RETURNING term`, term, force).Scan(&current)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrStaleWriter
		}
		if err != nil {
			return fmt.Errorf("events: writer term: %w", err)
		}
		// The term's row is locked until commit: what other writers
		// appended is committed and seen from here on.
		chained, err := chain(ctx, tx, evs)
		if err != nil {
			return err
		}
		rows, err := rowsOf(chained)
		if err != nil {
			return err
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"events"}, eventColumns, pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("events: append: %w", err)
		}
		return nil
	})
}

// chain makes every subject's changes start where its history ends: a
// change to the state it already ends in is dropped, a caught-up change
// starts there, and before a change from another state the change to it
// is recorded as caught up. A writer taking the history over computes its
// catch-up from the history it read; the writer it replaces may append
// before the new term's first append (make chaos recorded a plane, a
// switch and 4 links going down twice, and a plane degraded "from
// healthy" after the old leader had recorded it down).
func chain(ctx context.Context, tx pgx.Tx, evs []planes.Event) ([]planes.Event, error) {
	type subject struct{ kind, name string }
	var kinds, names []string
	seen := map[subject]bool{}
	for _, e := range evs {
		if k := (subject{e.SubjectKind, e.Subject}); e.Kind == planes.EventStateChange && !seen[k] {
			seen[k] = true
			kinds, names = append(kinds, k.kind), append(names, k.name)
		}
	}
	if len(kinds) == 0 {
		return evs, nil
	}
	rows, err := tx.Query(ctx, `SELECT s.kind, s.name, coalesce(e.to_state, '')
		FROM unnest($1::text[], $2::text[]) AS s(kind, name)
		CROSS JOIN LATERAL (SELECT to_state FROM events
			WHERE subject_kind = s.kind AND subject = s.name AND kind = $3 ORDER BY id DESC LIMIT 1) e`,
		kinds, names, planes.EventStateChange)
	if err != nil {
		return nil, fmt.Errorf("events: last states: %w", err)
	}
	last := map[subject]string{}
	var k subject
	var to string
	if _, err := pgx.ForEachRow(rows, []any{&k.kind, &k.name, &to}, func() error { last[k] = to; return nil }); err != nil {
		return nil, fmt.Errorf("events: last states: %w", err)
	}
	out := evs[:0:0]
	for _, e := range evs {
		k := subject{e.SubjectKind, e.Subject}
		if e.Kind == planes.EventStateChange {
			if prev, ok := last[k]; ok && prev != e.From {
				if prev == e.To {
					continue
				}
				if _, caughtUp := e.Evidence[caughtUpKey]; caughtUp {
					e.From = prev
				} else {
					// Another replica recorded a state this one did not
					// see: record the change to this one's, as a catch-up
					// after that read would have.
					out = append(out, planes.Event{At: e.At, SubjectKind: e.SubjectKind, Subject: e.Subject,
						Kind: planes.EventStateChange, From: prev, To: e.From, Reason: e.Reason,
						Evidence: map[string]any{caughtUpKey: "another replica recorded a state this one did not see"}})
				}
			}
			last[k] = e.To
		}
		out = append(out, e)
	}
	return out, nil
}

// caughtUpKey marks, in its evidence, a change recorded on taking the
// history over.
const caughtUpKey = "caught_up"

var eventColumns = []string{"at", "subject_kind", "subject", "kind", "from_state", "to_state", "reason", "evidence"}

func rowsOf(evs []planes.Event) ([][]any, error) {
	rows := make([][]any, len(evs))
	for i, e := range evs {
		var evidence []byte
		if e.Evidence != nil {
			var err error
			if evidence, err = json.Marshal(e.Evidence); err != nil {
				return nil, fmt.Errorf("events: evidence of %s %s: %w", e.SubjectKind, e.Subject, err)
			}
		}
		rows[i] = []any{e.At, e.SubjectKind, e.Subject, e.Kind, nullable(e.From), nullable(e.To), e.Reason, evidence}
	}
	return rows, nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Query selects events; zero fields select everything.
type Query struct {
	Since, Until time.Time // at >= Since, at < Until
	SubjectKind  string
	Subject      string
	Subjects     []string // any of these subjects (a plane's: itself, its switches and links)
	AfterID      int64    // the cursor, oldest first: events with a larger id
	BeforeID     int64    // the cursor, newest first: events with a smaller id
	Desc         bool     // newest first
	Limit        int
}

// List returns events in the order they happened (by id), or the
// reverse with Desc.
func (s *Store) List(ctx context.Context, q Query) ([]planes.Event, error) {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	order := "ASC"
	if q.Desc {
		order = "DESC"
	}
	rows, err := s.pool.Query(ctx, `SELECT id, at, subject_kind, subject, kind, coalesce(from_state, ''), coalesce(to_state, ''), reason, evidence
		FROM events
		WHERE id > $1 AND ($2::bigint = 0 OR id < $2) AND ($3::timestamptz IS NULL OR at >= $3) AND ($4::timestamptz IS NULL OR at < $4)
			AND ($5 = '' OR subject_kind = $5) AND ($6 = '' OR subject = $6) AND ($7::text[] IS NULL OR subject = ANY($7))
		ORDER BY id `+order+` LIMIT $8`, q.AfterID, q.BeforeID, nullTime(q.Since), nullTime(q.Until), q.SubjectKind, q.Subject, q.Subjects, q.Limit)
	if err != nil {
		return nil, fmt.Errorf("events: list: %w", err)
	}
	return collect(rows)
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// LastID is the id of the newest event (0: none). Ids grow in commit
// order: one writer (the policy leader's) appends, a batch at a time.
func (s *Store) LastID(ctx context.Context) (int64, error) {
	var id int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM events`).Scan(&id); err != nil {
		return 0, fmt.Errorf("events: last id: %w", err)
	}
	return id, nil
}

// LastStates returns the latest state change of every subject.
func (s *Store) LastStates(ctx context.Context) ([]planes.Event, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT ON (subject_kind, subject)
			id, at, subject_kind, subject, kind, coalesce(from_state, ''), coalesce(to_state, ''), reason, evidence
		FROM events WHERE kind = $1 ORDER BY subject_kind, subject, id DESC`, planes.EventStateChange)
	if err != nil {
		return nil, fmt.Errorf("events: last states: %w", err)
	}
	return collect(rows)
}

func collect(rows pgx.Rows) ([]planes.Event, error) {
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (planes.Event, error) {
		var e planes.Event
		var evidence []byte
		if err := r.Scan(&e.ID, &e.At, &e.SubjectKind, &e.Subject, &e.Kind, &e.From, &e.To, &e.Reason, &evidence); err != nil {
			return e, err
		}
		if len(evidence) > 0 {
			if err := json.Unmarshal(evidence, &e.Evidence); err != nil {
				return e, err
			}
		}
		return e, nil
	})
	if err != nil {
		return nil, fmt.Errorf("events: read: %w", err)
	}
	return out, nil
}

// Writer persists events from a bus subscription. It does not lose events
// on its own: while the database is unavailable it holds up to MaxPending
// events and then stops reading, so the subscription absorbs the rest (give
// it room: planes.Bus.SubscribeQueued). Events the subscription still had to
// drop are recorded as one history_gap event with their count (evidence
// "lost") and counted in multiplane_events_lost_total.
type Writer struct {
	store  *Store
	logger *slog.Logger
	// MaxBatch bounds one append; FlushEvery bounds how long an event waits.
	MaxBatch   int
	FlushEvery time.Duration
	// MaxPending bounds the events held while the database is unavailable.
	MaxPending int
	// Writes, if set, says whether this process writes the history now:
	// fabricd replicas all see the same transitions, and only the policy
	// leader records them. Events arriving while it is false are skipped.
	Writes func() bool
	// States, if set with Writes, gives the current state of every
	// subject (planes.Engine.States). When Writes turns true (this replica
	// took the history over), what changed while no replica recorded is
	// recorded from it, so every subject's changes chain in the history;
	// from then on a change to the state the history already holds is
	// not recorded twice.
	States func() []planes.Event
	// Term, if set, is the writer's term (policy leadership's election
	// revision) and whether it leads now: appends go through
	// Store.AppendAs, so once a later term has written, a writer's appends
	// are dropped (its successor caught up), even while it still believes
	// it leads: a deposed leader learns so only when its session expires,
	// and its appends after its successor's catch-up recorded transitions
	// twice (make chaos). A writer refused while leading with the same term
	// for TakeOverAfter takes over: it leads a new etcd cluster, whose
	// terms start again.
	Term          func() (term int64, leading bool)
	TakeOverAfter time.Duration

	metrics writerMetrics
}

// Default sizes of NewWriter, and of the queued subscription fabricd gives
// the writer (planes.Bus.SubscribeQueued(SubscriptionBuffer, SubscriptionLimit)).
// DefaultTakeOverAfter is three times the longest leader session TTL
// fabricd allows by default (5 s).
const (
	DefaultMaxPending    = 100_000
	SubscriptionBuffer   = 1024
	SubscriptionLimit    = 1_000_000
	DefaultTakeOverAfter = 15 * time.Second
)

// NewWriter returns a writer with default batching.
func NewWriter(store *Store, logger *slog.Logger) *Writer {
	return &Writer{store: store, logger: logger, MaxBatch: 1000, FlushEvery: 100 * time.Millisecond,
		MaxPending: DefaultMaxPending, TakeOverAfter: DefaultTakeOverAfter, metrics: newWriterMetrics()}
}

// Run writes events from sub until ctx ends or sub closes, then flushes
// what it holds. A failed write is retried with backoff; events are kept.
// maxRetryWait bounds the wait between failed writes: once PostgreSQL is
// back, what the history missed arrives within it (10 s was as long as
// the whole outage of a restart).
const maxRetryWait = 2 * time.Second

func (w *Writer) Run(ctx context.Context, sub *planes.Subscription) {
	var pending []planes.Event
	maxPending := w.MaxPending
	if maxPending <= 0 {
		maxPending = DefaultMaxPending
	}
	ticker := time.NewTicker(w.FlushEvery)
	defer ticker.Stop()
	backoff := time.Duration(0)
	var retryAt time.Time
	var seenDropped uint64 // the writer owns sub: every drop it counted is a gap
	// Taking the history over: writing follows Writes; recorded is each
	// subject's last recorded state once caught up (nil before).
	writing := w.Writes == nil
	var recorded map[string]string
	subjectKey := func(e planes.Event) string { return e.SubjectKind + "\x00" + e.Subject }
	catchUp := func(c context.Context) {
		if w.Writes == nil || w.States == nil {
			return
		}
		if !w.Writes() {
			writing, recorded = false, nil
			return
		}
		writing = true
		if recorded != nil {
			return
		}
		last, err := w.store.LastStates(c)
		if err != nil {
			w.logger.Warn("history not caught up yet; retrying", "err", err)
			return
		}
		rec := map[string]string{}
		for _, e := range last {
			rec[subjectKey(e)] = e.To
		}
		for _, e := range pending {
			if e.Kind == planes.EventStateChange {
				rec[subjectKey(e)] = e.To
			}
		}
		now := time.Now().UTC()
		for _, cur := range w.States() {
			from, ok := rec[subjectKey(cur)]
			if !ok {
				from = planes.InitialState(cur.SubjectKind)
			}
			if from == cur.To {
				continue
			}
			pending = append(pending, planes.Event{At: now, SubjectKind: cur.SubjectKind, Subject: cur.Subject,
				Kind: planes.EventStateChange, From: from, To: cur.To, Reason: cur.Reason,
				Evidence: map[string]any{caughtUpKey: "changed while no replica recorded the history; recorded on taking it over"}})
			rec[subjectKey(cur)] = cur.To
			w.metrics.caughtUp.Inc()
		}
		recorded = rec
	}
	// take queues e if this replica records now and e is news to the history.
	take := func(e planes.Event) {
		if w.Writes != nil && !w.Writes() {
			writing, recorded = false, nil
			return
		}
		if !writing || (recorded == nil && w.States != nil) {
			catchUp(ctx)
		}
		if recorded != nil && e.Kind == planes.EventStateChange {
			k := subjectKey(e)
			if recorded[k] == e.To {
				return // the history already holds this state
			}
			recorded[k] = e.To
		}
		pending = append(pending, e)
	}
	// gaps turns drops the subscription counted since the last look into
	// a history_gap event, coalesced with one not yet written.
	gaps := func() {
		d := sub.Dropped()
		if d == seenDropped {
			return
		}
		lost := d - seenDropped
		seenDropped = d
		w.metrics.lost.Add(float64(lost))
		if w.Writes != nil && !w.Writes() {
			return
		}
		w.logger.Error("events lost before reaching the history; recording a gap", "lost", lost)
		if n := len(pending); n > 0 && pending[n-1].Kind == planes.EventHistoryGap {
			prev, _ := pending[n-1].Evidence["lost"].(uint64)
			pending[n-1].Evidence["lost"] = prev + lost
			pending[n-1].Reason = gapReason(prev + lost)
			return
		}
		pending = append(pending, planes.Event{At: time.Now().UTC(), SubjectKind: planes.SubjectHistory, Subject: "events",
			Kind: planes.EventHistoryGap, Reason: gapReason(lost), Evidence: map[string]any{"lost": lost}})
	}
	// Refused while leading with refusedTerm since refusedSince.
	var refused bool
	var refusedTerm int64
	var refusedSince time.Time
	flush := func(c context.Context) {
		if len(pending) == 0 || time.Now().Before(retryAt) {
			return
		}
		var err error
		if w.Term != nil {
			term, leading := w.Term()
			force := leading && refused && refusedTerm == term && time.Since(refusedSince) >= w.TakeOverAfter
			err = w.store.AppendAs(c, pending, term, force)
			switch {
			case err == nil || !leading:
				refused = false
			case errors.Is(err, ErrStaleWriter) && !(refused && refusedTerm == term):
				refused, refusedTerm, refusedSince = true, term, time.Now()
			}
		} else {
			err = w.store.Append(c, pending)
		}
		if errors.Is(err, ErrStaleWriter) {
			w.logger.Warn("another replica records the history now; dropping what this one held", "events", len(pending))
			w.metrics.stale.Add(float64(len(pending)))
			pending, backoff, retryAt = pending[:0], 0, time.Time{}
			writing, recorded = false, nil
			return
		}
		if err != nil {
			backoff = min(max(2*backoff, 100*time.Millisecond), maxRetryWait)
			retryAt = time.Now().Add(backoff)
			w.logger.Warn("events not written yet; retrying", "events", len(pending), "retry_in", backoff, "err", err)
			w.metrics.failures.Inc()
			return
		}
		w.metrics.written.Add(float64(len(pending)))
		pending, backoff, retryAt = pending[:0], 0, time.Time{}
	}
	final := func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		gaps()
		retryAt = time.Time{}
		flush(c)
		if len(pending) > 0 {
			w.metrics.lost.Add(float64(len(pending)))
			w.logger.Error("events lost at shutdown", "events", len(pending))
		}
	}
	for {
		w.metrics.pending.Set(float64(len(pending)))
		// Backpressure: with MaxPending held, stop reading; the
		// subscription holds (or counts) what comes meanwhile.
		in := sub.C
		if len(pending) >= maxPending {
			in = nil
		}
		select {
		case e, ok := <-in:
			if !ok {
				final()
				return
			}
			gaps()
			take(e)
			if len(pending) >= w.MaxBatch {
				flush(ctx)
			}
		case <-ticker.C:
			gaps()
			catchUp(ctx)
			flush(ctx)
		case <-ctx.Done():
			// Take what is already queued, then flush.
		drain:
			for {
				select {
				case e, ok := <-sub.C:
					if !ok {
						break drain
					}
					take(e)
				default:
					break drain
				}
			}
			final()
			return
		}
	}
}

func gapReason(lost uint64) string {
	return fmt.Sprintf("%d events were lost before they could be recorded (fabricd fell behind or the database was unavailable too long)", lost)
}
