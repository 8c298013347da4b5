package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ChangesChannel is the PostgreSQL notification channel on which fabricd
// replicas tell each other that intents or the topology changed.
const ChangesChannel = "multiplane_changes"

// NotifyChange tells every replica listening that what names changed.
func (db *DB) NotifyChange(ctx context.Context, what string) error {
	if _, err := db.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, ChangesChannel, what); err != nil {
		return fmt.Errorf("store: notify: %w", err)
	}
	return nil
}

// ListenChanges calls fn with the payload of every change notification
// until ctx ends, reconnecting after errors.
func (db *DB) ListenChanges(ctx context.Context, fn func(what string)) {
	for ctx.Err() == nil {
		if err := db.listen(ctx, fn); err != nil && ctx.Err() == nil {
			db.logger.Warn("change notifications interrupted; reconnecting", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// listen holds its own connection, outside the pool, while it waits.
func (db *DB) listen(ctx context.Context, fn func(string)) error {
	conn, err := pgx.ConnectConfig(ctx, db.pool.Config().ConnConfig)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+ChangesChannel); err != nil {
		return err
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		fn(n.Payload)
	}
}
