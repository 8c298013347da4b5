// Package storetest gives tests a real, fresh PostgreSQL database each.
//
// A test package calls Main from TestMain, and each test calls New:
//
//	func TestMain(m *testing.M) { storetest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		db := storetest.New(t) // migrated to head, empty, dropped after the test
//		_, err := db.Pool().Exec(testenv.Context(t), "INSERT INTO planes (name) VALUES ('p0')")
//		...
//	}
//
// Databases are created on the server named by DATABASE_URL when it is set
// (its user needs CREATEDB; the URL's database is used only to create and
// drop the test databases). Otherwise the first New starts one private
// cluster per test binary (store/pgcluster, under a fresh directory in the
// temp dir, durability off), which Main stops and removes after the tests,
// so no postgres is left behind. Without PostgreSQL binaries the tests are
// skipped, or fail with CI=true (testenv.Require).
//
// Main also checks for leaked goroutines (go.uber.org/goleak) once the
// tests have passed; pass goleak options to tolerate known ones.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/store"
	"github.com/multiplane/multiplane/store/pgcluster"
)

// EnvDatabaseURL names the environment variable that points tests at an
// existing server instead of a private cluster.
const EnvDatabaseURL = "DATABASE_URL"

var (
	mainRunning atomic.Bool

	mu          sync.Mutex
	started     bool
	baseURL     string // admin connection: where test databases are created
	cluster     *pgcluster.Cluster
	clusterDir  string
	startErr    error
	noBinaries  bool
	stopTimeout = 30 * time.Second
)

// Main runs the tests, then stops the private cluster (if one was started)
// and, when the tests passed, fails the binary if goroutines leaked
// (goleak.Find with opts). It does not return. Call it from TestMain.
func Main(m *testing.M, opts ...goleak.Option) {
	mainRunning.Store(true)
	code := m.Run()
	if err := shutdown(); err != nil {
		fmt.Fprintf(os.Stderr, "storetest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "storetest: goroutines leaked: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// New returns a fresh database migrated to head, with no rows but
// fabric_state's. It is closed and dropped when the test ends.
func New(t testing.TB) *store.DB {
	t.Helper()
	db := open(t, newDatabase(t))
	if err := db.Migrate(testenv.Context(t)); err != nil {
		t.Fatalf("storetest: migrate: %v", err)
	}
	return db
}

// NewUnmigrated returns a fresh, empty database on which no migration has
// run, for testing migrations. It is closed and dropped when the test ends.
func NewUnmigrated(t testing.TB) *store.DB {
	t.Helper()
	return open(t, newDatabase(t))
}

// URL returns the connection URL of a fresh database migrated to head, for
// tests of code that opens its own connections (fabricd --database-url). It
// is dropped when the test ends.
func URL(t testing.TB) string {
	t.Helper()
	u := newDatabase(t)
	db, err := store.Open(testenv.Context(t), u, testenv.Logger(t))
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	defer db.Close()
	if err := db.Migrate(testenv.Context(t)); err != nil {
		t.Fatalf("storetest: migrate: %v", err)
	}
	return u
}

func open(t testing.TB, dbURL string) *store.DB {
	t.Helper()
	db, err := store.Open(testenv.Context(t), dbURL, testenv.Logger(t))
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	t.Cleanup(db.Close) // runs before the database is dropped
	return db
}

// newDatabase creates an empty database, registers its removal and
// returns its URL.
func newDatabase(t testing.TB) string {
	t.Helper()
	if !mainRunning.Load() {
		t.Fatal("storetest: call storetest.Main(m) from TestMain, so that the private PostgreSQL is stopped after the tests")
	}
	base := server(t)
	name := databaseName(t)
	ctx := testenv.Context(t)
	if err := adminExec(ctx, base, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("storetest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := adminExec(ctx, base, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("storetest: drop database %s: %v", name, err)
		}
	})
	dbURL, err := withDatabase(base, name)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	return dbURL
}

// server returns the admin URL, starting the private cluster on first use.
func server(t testing.TB) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if !started {
		started = true
		baseURL, startErr = startServer()
		noBinaries = errors.Is(startErr, pgcluster.ErrNoBinaries)
	}
	if noBinaries {
		testenv.Require(t, false, startErr.Error())
	}
	if startErr != nil {
		t.Fatalf("storetest: %v", startErr)
	}
	return baseURL
}

func startServer() (string, error) {
	if u := os.Getenv(EnvDatabaseURL); u != "" {
		return u, nil
	}
	if _, err := pgcluster.FindBinDir(); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "mp-storetest-")
	if err != nil {
		return "", err
	}
	// The cluster logs only problems; postgres's own output is in
	// <dir>/postgres.log while the tests run.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := pgcluster.Start(context.Background(), pgcluster.Options{
		DataDir: dir,
		Logger:  logger,
		NoSync:  true,
	})
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	cluster, clusterDir = c, dir
	return c.URL(), nil
}

// shutdown stops the private cluster and removes its directory.
func shutdown() error {
	mu.Lock()
	defer mu.Unlock()
	if cluster == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	err := cluster.Stop(ctx)
	if rmErr := os.RemoveAll(clusterDir); rmErr != nil && err == nil {
		err = rmErr
	}
	cluster, clusterDir = nil, ""
	return err
}

func adminExec(ctx context.Context, base, sql string) error {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// databaseName makes a unique, recognisable database name from the test's
// name: mp_test_<name>_<random>, within PostgreSQL's 63-byte limit.
func databaseName(t testing.TB) string {
	var b []byte
	for _, r := range strings.ToLower(t.Name()) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b = append(b, byte(r))
		case len(b) > 0 && b[len(b)-1] != '_':
			b = append(b, '_')
		}
	}
	const maxName = 36 // + "mp_test_" + "_" + 10 hex digits <= 63
	if len(b) > maxName {
		b = b[len(b)-maxName:] // the end of a subtest name is the distinctive part
	}
	var rnd [5]byte
	_, _ = rand.Read(rnd[:])
	return "mp_test_" + strings.Trim(string(b), "_") + "_" + hex.EncodeToString(rnd[:])
}

// withDatabase returns base (a URL or key=value DSN) pointing at database name.
func withDatabase(base, name string) (string, error) {
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		u, err := url.Parse(base)
		if err != nil {
			return "", fmt.Errorf("parse %s: %w", EnvDatabaseURL, err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	// key=value DSN: a later dbname overrides an earlier one.
	return base + " dbname=" + name, nil
}
