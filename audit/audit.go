// Package audit records who changed what through the API, and when, in the
// audit_log table, and lists it back for admins.
//
//	log := audit.New(pool)
//	err := log.Record(ctx, audit.Entry{Actor: "alice", Role: "admin", Method: "PUT", ...})
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Entry is one audited request.
type Entry struct {
	ID         int64           `json:"id"`
	At         time.Time       `json:"at"`
	Actor      string          `json:"actor"`
	Role       string          `json:"role"`
	Method     string          `json:"method"`
	Path       string          `json:"path"`
	Action     string          `json:"action"`
	Target     string          `json:"target,omitempty"`
	Status     int             `json:"status"`
	Result     string          `json:"result"`
	RemoteAddr string          `json:"remote_addr,omitempty"`
	Detail     json.RawMessage `json:"detail,omitempty"`
}

// Log writes and reads the audit log.
type Log struct{ pool *pgxpool.Pool }

// New returns an audit log over a migrated database.
func New(pool *pgxpool.Pool) *Log { return &Log{pool: pool} }

// Record appends an entry.
func (l *Log) Record(ctx context.Context, e Entry) error {
	var detail any
	if len(e.Detail) > 0 {
		detail = e.Detail
	}
	_, err := l.pool.Exec(ctx, `INSERT INTO audit_log (actor, role, method, path, action, target, status, result, remote_addr, detail)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		e.Actor, e.Role, e.Method, e.Path, e.Action, e.Target, e.Status, e.Result, e.RemoteAddr, detail)
	if err != nil {
		return fmt.Errorf("audit: record: %w", err)
	}
	return nil
}

// List returns up to limit entries with id below beforeID (0 = newest), newest first.
func (l *Log) List(ctx context.Context, beforeID int64, limit int) ([]Entry, error) {
	if beforeID <= 0 {
		beforeID = 1<<63 - 1
	}
	rows, err := l.pool.Query(ctx, `SELECT id, at, actor, role, method, path, action, target, status, result, remote_addr, detail
		FROM audit_log WHERE id < $1 ORDER BY id DESC LIMIT $2`, beforeID, limit)
	if err != nil {
		return nil, fmt.Errorf("audit: list: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) {
		var e Entry
		var detail []byte
		err := r.Scan(&e.ID, &e.At, &e.Actor, &e.Role, &e.Method, &e.Path, &e.Action, &e.Target, &e.Status, &e.Result, &e.RemoteAddr, &detail)
		e.Detail = detail
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("audit: list: %w", err)
	}
	return out, nil
}
