// Package store is fabricd's access to PostgreSQL: a pgx connection pool, the
// schema migrations in package migrations, a readiness check and pool
// metrics.
//
// Typical use in fabricd:
//
//	db, err := store.Open(ctx, databaseURL, logger) // a pgx URL or key=value DSN
//	if err != nil { ... }
//	defer db.Close()
//	if err := db.Migrate(ctx); err != nil { ... } // to head; no-op when there
//	registry.MustRegister(db.Collector())          // multiplane_store_pool_*
//	// /readyz: db.Ready(ctx)
//	// queries: db.Pool().Query(ctx, ...), pgx.BeginFunc(ctx, db.Pool(), ...)
//
// Without an external server, store/pgcluster runs a private PostgreSQL and
// gives its URL; tests get a fresh migrated database from store/storetest.
//
// The schema version is kept by golang-migrate in the table
// schema_migrations; HeadVersion is the highest version among the embedded
// migration files. Ready and Migrate report a schema they cannot work with
// as a *SchemaError matching ErrNotMigrated, ErrDirty or ErrSchemaTooNew.
package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/multiplane/multiplane/migrations"
)

// MigrationsTable is the table where golang-migrate records the schema version.
const MigrationsTable = "schema_migrations"

// Errors; test with errors.Is.
var (
	// ErrUnavailable: the database cannot be reached.
	ErrUnavailable = errors.New("store: database unavailable")
	// ErrNotMigrated: the schema is older than HeadVersion (run Migrate).
	ErrNotMigrated = errors.New("store: database schema is not migrated to the head version")
	// ErrDirty: a migration failed part-way and left the schema dirty.
	ErrDirty = errors.New("store: database schema is dirty")
	// ErrSchemaTooNew: the schema is newer than this binary knows (a newer
	// fabricd migrated it).
	ErrSchemaTooNew = errors.New("store: database schema is newer than this binary")
)

// SchemaError describes a schema version that Ready or Migrate cannot work
// with. It matches (errors.Is) one of ErrNotMigrated, ErrDirty and
// ErrSchemaTooNew.
type SchemaError struct {
	Version uint // current version; 0 when no migration has run
	Dirty   bool
	Head    uint // HeadVersion
	// InProgress: another session is migrating right now (Dirty is then
	// expected, and Err is ErrNotMigrated).
	InProgress bool
	Err        error
}

func (e *SchemaError) Error() string {
	switch {
	case e.InProgress:
		return fmt.Sprintf("%v: a migration to version %d is in progress (head %d)", e.Err, e.Version, e.Head)
	case errors.Is(e.Err, ErrDirty):
		return fmt.Sprintf("%v at version %d: a migration failed part-way; repair the schema by hand, then set %s to version %d, dirty=false (golang-migrate `force %d`), and migrate again",
			e.Err, e.Version, MigrationsTable, e.Version, e.Version)
	case errors.Is(e.Err, ErrSchemaTooNew):
		return fmt.Sprintf("%v: version %d, this binary knows up to %d; upgrade fabricd", e.Err, e.Version, e.Head)
	default:
		return fmt.Sprintf("%v: version %d, head %d", e.Err, e.Version, e.Head)
	}
}

func (e *SchemaError) Unwrap() error { return e.Err }

// DB is fabricd's database handle. It is safe for concurrent use.
type DB struct {
	pool      *pgxpool.Pool
	logger    *slog.Logger
	closeOnce sync.Once
}

// Open connects to the database at databaseURL (a pgx connection string:
// postgres://... URL or key=value DSN), checks that it answers, and returns
// a DB backed by a connection pool (pool_* parameters in the URL tune it).
// A nil logger discards.
func Open(ctx context.Context, databaseURL string, logger *slog.Logger) (*DB, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "store")
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		// pgx's parse errors redact the password.
		return nil, fmt.Errorf("store: parse database URL: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	logger.Info("connected to database", "host", cfg.ConnConfig.Host, "database", cfg.ConnConfig.Database,
		"user", cfg.ConnConfig.User, "max_conns", cfg.MaxConns)
	return &DB{pool: pool, logger: logger}, nil
}

// Pool returns the connection pool, for queries.
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

// Close closes the pool, waiting for acquired connections to be released.
// It is safe to call more than once.
func (db *DB) Close() {
	db.closeOnce.Do(db.pool.Close)
}

// HeadVersion returns the highest migration version embedded in package
// migrations: the version Migrate brings a database to.
func HeadVersion() (uint, error) { return headVersion() }

var headVersion = sync.OnceValues(func() (uint, error) {
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		return 0, fmt.Errorf("store: read migrations: %w", err)
	}
	var head uint
	for _, e := range entries {
		m, err := source.Parse(e.Name())
		if err != nil {
			continue
		}
		head = max(head, m.Version)
	}
	if head == 0 {
		return 0, errors.New("store: no migrations embedded")
	}
	return head, nil
})

// Version returns the schema version recorded in the database (0 when no
// migration has run) and whether it is dirty.
func (db *DB) Version(ctx context.Context) (version uint, dirty bool, err error) {
	var v int64
	err = db.pool.QueryRow(ctx, "SELECT version, dirty FROM "+MigrationsTable+" LIMIT 1").Scan(&v, &dirty)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		if v < 0 { // golang-migrate's "nil version", recorded when dirty
			v = 0
		}
		return uint(v), dirty, nil
	case errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
		return 0, false, nil
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	default:
		return 0, false, fmt.Errorf("%w: read schema version: %w", ErrUnavailable, err)
	}
}

// Ready reports whether the database is usable by this binary: it answers,
// and its schema is at HeadVersion and not dirty. The error matches
// ErrUnavailable, or is a *SchemaError.
func (db *DB) Ready(ctx context.Context) error {
	if err := db.pool.Ping(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	head, err := HeadVersion()
	if err != nil {
		return err
	}
	v, dirty, err := db.Version(ctx)
	if err != nil {
		return err
	}
	err = checkVersion(v, dirty, head, true)
	var se *SchemaError
	if errors.As(err, &se) && se.Dirty {
		// golang-migrate marks the version dirty while it runs a migration.
		var migrating bool
		if qerr := db.pool.QueryRow(ctx, `SELECT EXISTS (
			SELECT 1 FROM pg_locks
			WHERE locktype = 'advisory' AND granted AND classid = $1 AND objid = $2 AND objsubid = 2
			  AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`,
			migrateLockClass, migrateLockObj).Scan(&migrating); qerr == nil && migrating {
			se.InProgress, se.Err = true, ErrNotMigrated
		}
	}
	return err
}

// The advisory lock (pg_advisory_lock(int4, int4)) that Migrate holds for
// its whole run, so that concurrent callers see a settled version.
const (
	migrateLockClass = 0x6d706c6e // "mpln"
	migrateLockObj   = 1
)

// lockMigrations takes the migration lock on a connection of its own (not
// from the pool, which may be as small as one connection) and returns a
// function that releases it.
func (db *DB) lockMigrations(ctx context.Context) (unlock func(), err error) {
	conn, err := pgx.ConnectConfig(ctx, db.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, $2)", migrateLockClass, migrateLockObj); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("store: migrate: take lock: %w", err)
	}
	return func() {
		// Unlock before closing: a closed session's backend lets the lock
		// go only when it exits, after Close returns, so a Ready just after
		// Migrate could still see a migration in progress (it did in CI).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn.Exec(ctx, "SELECT pg_advisory_unlock($1, $2)", migrateLockClass, migrateLockObj)
		conn.Close(ctx)
	}, nil
}

// checkVersion returns a *SchemaError when the schema at v cannot be used
// (atHead) or migrated (!atHead) by a binary whose head is head.
func checkVersion(v uint, dirty bool, head uint, atHead bool) error {
	se := &SchemaError{Version: v, Dirty: dirty, Head: head}
	switch {
	case dirty:
		se.Err = ErrDirty
	case v > head:
		se.Err = ErrSchemaTooNew
	case atHead && v < head:
		se.Err = ErrNotMigrated
	default:
		return nil
	}
	return se
}

// Migrate brings the schema to HeadVersion with golang-migrate (pgx/v5
// driver, iofs source over migrations.FS). It is a no-op at head; concurrent
// callers (several fabricd replicas) serialise on an advisory lock held for
// the whole run, and Ready meanwhile reports the migration as in progress.
// A dirty schema or one newer than this binary is a *SchemaError, and
// nothing is changed. When ctx is cancelled, Migrate stops after the
// migration in progress.
func (db *DB) Migrate(ctx context.Context) (err error) {
	head, err := HeadVersion()
	if err != nil {
		return err
	}
	unlock, err := db.lockMigrations(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	sqlDB := stdlib.OpenDBFromPool(db.pool) // closing it leaves the pool open
	driver, err := migratepgx.WithInstance(sqlDB, &migratepgx.Config{MigrationsTable: MigrationsTable})
	if err != nil {
		sqlDB.Close()
		return fmt.Errorf("store: migrate: %w", err)
	}
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		driver.Close()
		return fmt.Errorf("store: migrate: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		src.Close()
		driver.Close()
		return fmt.Errorf("store: migrate: %w", err)
	}
	defer func() {
		srcErr, dbErr := m.Close()
		if err == nil && dbErr != nil {
			err = fmt.Errorf("store: migrate: close: %w", dbErr)
		}
		_ = srcErr
	}()
	m.Log = migrateLogger{db.logger}
	stop := context.AfterFunc(ctx, func() {
		select {
		case m.GracefulStop <- true:
		default:
		}
	})
	defer stop()

	before, dirty, err := m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		before, dirty, err = 0, false, nil
	}
	if err != nil {
		return fmt.Errorf("%w: read schema version: %w", ErrUnavailable, err)
	}
	db.logger.Info("schema version before migrating", "version", before, "dirty", dirty, "head", head)
	if err := checkVersion(before, dirty, head, false); err != nil {
		return err
	}
	if before == head {
		return nil
	}
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		var de migrate.ErrDirty
		if errors.As(err, &de) {
			return &SchemaError{Version: uint(max(de.Version, 0)), Dirty: true, Head: head, Err: ErrDirty}
		}
		return fmt.Errorf("store: migrate: %w", err)
	}
	after, dirty, err := m.Version()
	if err != nil {
		return fmt.Errorf("store: migrate: read schema version: %w", err)
	}
	db.logger.Info("schema migrated", "from", before, "to", after, "dirty", dirty)
	if after < head && ctx.Err() != nil { // stopped early by GracefulStop
		return fmt.Errorf("store: migrate: stopped at version %d of %d: %w", after, head, ctx.Err())
	}
	return checkVersion(after, dirty, head, true)
}

// migrateLogger adapts slog to golang-migrate's Logger.
type migrateLogger struct{ logger *slog.Logger }

func (l migrateLogger) Printf(format string, v ...any) {
	l.logger.Debug("golang-migrate", "line", strings.TrimSpace(fmt.Sprintf(format, v...)))
}

func (l migrateLogger) Verbose() bool { return true }
