// Package intents keeps operators' standing requests in PostgreSQL: drains
// (move traffic off a plane, switch or link) and rate classes with their
// endpoint assignments. Policy reads them through Load.
//
//	st := intents.New(pool)
//	d, err := st.AddDrain(ctx, policy.DrainPlane, "p2", "maintenance", "alice")
//	in, err := st.Load(ctx) // policy.Intents
package intents

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/multiplane/multiplane/policy"
)

// Errors a caller maps to statuses.
var (
	ErrNotFound = errors.New("intents: not found")
	ErrInUse    = errors.New("intents: rate class is assigned to endpoints")
	ErrInvalid  = errors.New("intents: invalid")
	ErrDrained  = errors.New("intents: the target is drained already")
)

// Drain is a stored drain.
type Drain struct {
	policy.Drain
	Reason    string     `json:"reason"`
	CreatedBy string     `json:"created_by"`
	CreatedAt time.Time  `json:"created_at"`
	RemovedAt *time.Time `json:"removed_at,omitempty"`
	RemovedBy string     `json:"removed_by,omitempty"`
}

// Store reads and writes intents.
type Store struct{ pool *pgxpool.Pool }

// New returns a store over a migrated database.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// AddDrain records an active drain; a target has at most one (ErrDrained).
func (s *Store) AddDrain(ctx context.Context, kind policy.DrainKind, target, reason, by string) (Drain, error) {
	d := Drain{Drain: policy.Drain{Kind: kind, Target: target}, Reason: reason, CreatedBy: by}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// One drain at a time per target, also between replicas.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('drains'), hashtext($1 || '/' || $2))`, string(kind), target); err != nil {
			return err
		}
		var id int64
		err := tx.QueryRow(ctx, `SELECT id FROM drains WHERE target_kind = $1 AND target = $2 AND removed_at IS NULL`,
			string(kind), target).Scan(&id)
		if err == nil {
			return fmt.Errorf("%w (drain %d)", ErrDrained, id)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO drains (target_kind, target, reason, created_by) VALUES ($1, $2, $3, $4)
			RETURNING id, created_at`, string(kind), target, reason, by).Scan(&d.ID, &d.CreatedAt)
	})
	if errors.Is(err, ErrDrained) {
		return Drain{}, err
	}
	if err != nil {
		return Drain{}, fmt.Errorf("intents: add drain: %w", err)
	}
	return d, nil
}

// RemoveDrain ends an active drain.
func (s *Store) RemoveDrain(ctx context.Context, id int64, by string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE drains SET removed_at = now(), removed_by = $2 WHERE id = $1 AND removed_at IS NULL`, id, by)
	if err != nil {
		return fmt.Errorf("intents: remove drain: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: no active drain %d", ErrNotFound, id)
	}
	return nil
}

// Drains lists drains, newest first; all includes removed ones.
func (s *Store) Drains(ctx context.Context, all bool) ([]Drain, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, target_kind, target, reason, created_by, created_at, removed_at, coalesce(removed_by, '')
		FROM drains WHERE $1 OR removed_at IS NULL ORDER BY id DESC`, all)
	if err != nil {
		return nil, fmt.Errorf("intents: drains: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Drain, error) {
		var d Drain
		var kind string
		err := r.Scan(&d.ID, &kind, &d.Target, &d.Reason, &d.CreatedBy, &d.CreatedAt, &d.RemovedAt, &d.RemovedBy)
		d.Kind = policy.DrainKind(kind)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("intents: drains: %w", err)
	}
	return out, nil
}

// PutClass creates or updates a rate class.
func (s *Store) PutClass(ctx context.Context, c policy.RateClass) error {
	if c.EgressBps < 0 || c.IngressBps < 0 {
		return fmt.Errorf("%w: rates must not be negative", ErrInvalid)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO rate_classes (name, egress_bps, ingress_bps, priority) VALUES ($1, $2, $3, $4)
		ON CONFLICT (name) DO UPDATE SET egress_bps = excluded.egress_bps, ingress_bps = excluded.ingress_bps, priority = excluded.priority`,
		c.Name, c.EgressBps, c.IngressBps, c.Priority)
	if err != nil {
		return fmt.Errorf("intents: put rate class: %w", err)
	}
	return nil
}

// DeleteClass removes a rate class no endpoint uses.
func (s *Store) DeleteClass(ctx context.Context, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM rate_classes WHERE name = $1`, name)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23503" {
		return fmt.Errorf("%w: %q", ErrInUse, name)
	}
	if err != nil {
		return fmt.Errorf("intents: delete rate class: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: rate class %q", ErrNotFound, name)
	}
	return nil
}

// Classes lists rate classes by name.
func (s *Store) Classes(ctx context.Context) ([]policy.RateClass, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, egress_bps, ingress_bps, priority FROM rate_classes ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("intents: rate classes: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (policy.RateClass, error) {
		var c policy.RateClass
		err := r.Scan(&c.Name, &c.EgressBps, &c.IngressBps, &c.Priority)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("intents: rate classes: %w", err)
	}
	return out, nil
}

// Assign puts an endpoint in a rate class; class "" removes the assignment
// (ErrNotFound for an endpoint the topology lacks).
func (s *Store) Assign(ctx context.Context, endpoint, class string) error {
	var err error
	if class == "" {
		var known bool
		err = s.pool.QueryRow(ctx, `WITH gone AS (DELETE FROM endpoint_rate_classes WHERE endpoint = $1)
			SELECT EXISTS (SELECT 1 FROM endpoints WHERE name = $1)`, endpoint).Scan(&known)
		if err == nil && !known {
			return fmt.Errorf("%w: endpoint %q", ErrNotFound, endpoint)
		}
	} else {
		_, err = s.pool.Exec(ctx, `INSERT INTO endpoint_rate_classes (endpoint, class) VALUES ($1, $2)
			ON CONFLICT (endpoint) DO UPDATE SET class = excluded.class`, endpoint, class)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23503" {
		if pgErr.ConstraintName == "endpoint_rate_classes_class_fkey" {
			return fmt.Errorf("%w: rate class %q", ErrNotFound, class)
		}
		return fmt.Errorf("%w: endpoint %q", ErrNotFound, endpoint)
	}
	if err != nil {
		return fmt.Errorf("intents: assign rate class: %w", err)
	}
	return nil
}

// Load returns the active intents for policy.
func (s *Store) Load(ctx context.Context) (policy.Intents, error) {
	var in policy.Intents
	drains, err := s.Drains(ctx, false)
	if err != nil {
		return in, err
	}
	for _, d := range drains {
		in.Drains = append(in.Drains, d.Drain)
	}
	if in.Classes, err = s.Classes(ctx); err != nil {
		return in, err
	}
	rows, err := s.pool.Query(ctx, `SELECT endpoint, class FROM endpoint_rate_classes`)
	if err != nil {
		return in, fmt.Errorf("intents: assignments: %w", err)
	}
	defer rows.Close()
	in.Assignments = map[string]string{}
	for rows.Next() {
		var e, c string
		if err := rows.Scan(&e, &c); err != nil {
			return in, fmt.Errorf("intents: assignments: %w", err)
		}
		in.Assignments[e] = c
	}
	return in, rows.Err()
}
