package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/migrations"
	"github.com/multiplane/multiplane/store"
	"github.com/multiplane/multiplane/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func head(t *testing.T) uint {
	t.Helper()
	h, err := store.HeadVersion()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func exec(t *testing.T, db *store.DB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool().Exec(testenv.Context(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestHeadVersionFromFiles(t *testing.T) {
	h := head(t)
	name := fmt.Sprintf("%04d_", h)
	found := false
	entries, _ := migrations.FS.ReadDir(".")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), name) {
			found = true
		}
		if strings.HasPrefix(e.Name(), fmt.Sprintf("%04d_", h+1)) {
			t.Errorf("HeadVersion %d but %s exists", h, e.Name())
		}
	}
	if !found {
		t.Errorf("HeadVersion %d has no file %s*", h, name)
	}
}

func TestMigrate(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup runs on a fresh, unmigrated database.
		setup       func(t *testing.T, db *store.DB)
		wantReady   error // from Ready before Migrate
		wantMigrate error
		wantVersion uint // after Migrate; 0 = head
	}{
		{
			name:      "empty database to head",
			setup:     func(*testing.T, *store.DB) {},
			wantReady: store.ErrNotMigrated,
		},
		{
			name: "idempotent at head",
			setup: func(t *testing.T, db *store.DB) {
				if err := db.Migrate(testenv.Context(t)); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "dirty",
			setup: func(t *testing.T, db *store.DB) {
				exec(t, db, "CREATE TABLE schema_migrations (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL)")
				exec(t, db, "INSERT INTO schema_migrations VALUES (1, true)")
			},
			wantReady:   store.ErrDirty,
			wantMigrate: store.ErrDirty,
			wantVersion: 1,
		},
		{
			name: "newer than this binary",
			setup: func(t *testing.T, db *store.DB) {
				if err := db.Migrate(testenv.Context(t)); err != nil {
					t.Fatal(err)
				}
				exec(t, db, "UPDATE schema_migrations SET version = version + 1")
			},
			wantReady:   store.ErrSchemaTooNew,
			wantMigrate: store.ErrSchemaTooNew,
			wantVersion: head(t) + 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testenv.Context(t)
			db := storetest.NewUnmigrated(t)
			tc.setup(t, db)

			err := db.Ready(ctx)
			if !errors.Is(err, tc.wantReady) || (tc.wantReady == nil) != (err == nil) {
				t.Errorf("Ready before Migrate: got %v, want %v", err, tc.wantReady)
			}
			if tc.wantReady != nil {
				var se *store.SchemaError
				if !errors.As(err, &se) {
					t.Errorf("Ready error %T is not a *store.SchemaError", err)
				}
				t.Logf("Ready: %v", err)
			}

			err = db.Migrate(ctx)
			if !errors.Is(err, tc.wantMigrate) || (tc.wantMigrate == nil) != (err == nil) {
				t.Fatalf("Migrate: got %v, want %v", err, tc.wantMigrate)
			}
			want := tc.wantVersion
			if want == 0 {
				want = head(t)
			}
			v, _, err := db.Version(ctx)
			if err != nil || v != want {
				t.Errorf("Version after Migrate = %d (%v), want %d", v, err, want)
			}
			if tc.wantMigrate == nil {
				if err := db.Ready(ctx); err != nil {
					t.Errorf("Ready after Migrate: %v", err)
				}
			}
		})
	}
}

// TestMigrateConcurrently migrates one empty database from several handles
// at once, as several fabricd replicas starting together would.
func TestMigrateConcurrently(t *testing.T) {
	ctx := testenv.Context(t)
	first := storetest.NewUnmigrated(t)
	connString := first.Pool().Config().ConnString()
	dbs := []*store.DB{first}
	for range 2 {
		db, err := store.Open(ctx, connString, testenv.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(db.Close)
		dbs = append(dbs, db)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(dbs))
	for i, db := range dbs {
		wg.Go(func() { errs[i] = db.Migrate(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Migrate %d: %v", i, err)
		}
	}
	if err := first.Ready(ctx); err != nil {
		t.Errorf("Ready: %v", err)
	}
}

// TestDownMigrations runs every down migration and then every up migration
// again, so the .down.sql files are known to work.
func TestDownMigrations(t *testing.T) {
	ctx := testenv.Context(t)
	db := storetest.New(t)
	sqlDB := stdlib.OpenDBFromPool(db.Pool())
	driver, err := migratepgx.WithInstance(sqlDB, &migratepgx.Config{MigrationsTable: store.MigrationsTable})
	if err != nil {
		t.Fatal(err)
	}
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Down(); err != nil {
		t.Fatalf("Down: %v", err)
	}
	var n int
	if err := db.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relname <> $1 AND c.relkind IN ('r', 'v', 'S', 'i', 'f', 'p', 'm')
		AND c.relname NOT LIKE $1 || '%'`, store.MigrationsTable).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d relations left after migrating down", n)
	}
	if err := db.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'public'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d functions left after migrating down", n)
	}
	if err := db.Ready(ctx); !errors.Is(err, store.ErrNotMigrated) {
		t.Errorf("Ready after Down: %v, want ErrNotMigrated", err)
	}
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after Down: %v", err)
	}
	if err := db.Ready(ctx); err != nil {
		t.Errorf("Ready: %v", err)
	}
}

func TestOpenUnavailable(t *testing.T) {
	_, err := store.Open(testenv.Context(t), "postgres://nobody@/none?host=/nonexistent-mp-socket-dir&connect_timeout=5", testenv.Logger(t))
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
}

func TestEventsAppendOnly(t *testing.T) {
	ctx := testenv.Context(t)
	db := storetest.New(t)
	exec(t, db, `INSERT INTO events (subject_kind, subject, kind, from_state, to_state, reason, evidence)
		VALUES ('plane', 'p0', 'state', 'healthy', 'degraded', 'loss', '{"loss": 0.02}')`)
	for _, sql := range []string{
		"UPDATE events SET reason = 'rewritten'",
		"DELETE FROM events",
		"TRUNCATE events",
	} {
		t.Run(strings.Fields(sql)[0], func(t *testing.T) {
			_, err := db.Pool().Exec(ctx, sql)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "23001" || !strings.Contains(pgErr.Message, "append-only") {
				t.Fatalf("%s: got %v, want restrict_violation (23001) saying append-only", sql, err)
			}
		})
	}
	var n int
	var reason string
	if err := db.Pool().QueryRow(ctx, "SELECT count(*), min(reason) FROM events").Scan(&n, &reason); err != nil {
		t.Fatal(err)
	}
	if n != 1 || reason != "loss" {
		t.Errorf("events changed: %d rows, reason %q", n, reason)
	}
}

// TestSchemaRules checks the schema's rules on a small fabric, statement by
// statement in order: "" expects success, otherwise the SQLSTATE.
func TestSchemaRules(t *testing.T) {
	ctx := testenv.Context(t)
	db := storetest.New(t)
	steps := []struct {
		sql      string
		wantCode string
	}{
		{"INSERT INTO planes (name) VALUES ('p0'), ('p1')", ""},
		{"INSERT INTO planes (name) VALUES ('')", "23514"},
		{"INSERT INTO switches (name, plane, gnmi_address) VALUES ('s0', 'p0', 's0:57400'), ('s1', 'p1', 's1:57400')", ""},
		{"INSERT INTO switches (name, plane, gnmi_address) VALUES ('sx', 'nope', 'sx:57400')", "23503"},
		{"INSERT INTO switches (name, plane, gnmi_address, gnmi_tls_cert) VALUES ('sy', 'p0', 'sy:1', 'cert')", "23514"},
		{"INSERT INTO switch_interfaces (switch, name, speed_bps) VALUES ('s0', 'eth1', 400000000000), ('s1', 'eth1', 400000000000)", ""},
		{"INSERT INTO switch_interfaces (switch, name, speed_bps) VALUES ('s0', 'eth2', -1)", "23514"},
		{"INSERT INTO endpoints (name) VALUES ('h0')", ""},
		{"INSERT INTO endpoint_ports (endpoint, plane, address, switch, interface) VALUES ('h0', 'p0', '10.0.0.1', 's0', 'eth1'), ('h0', 'p1', '10.1.0.1', 's1', 'eth1')", ""},
		// port on plane p0 cabled to a p1 switch
		{"INSERT INTO endpoints (name) VALUES ('h1')", ""},
		{"INSERT INTO switch_interfaces (switch, name) VALUES ('s1', 'eth2')", ""},
		{"INSERT INTO endpoint_ports (endpoint, plane, address, switch, interface) VALUES ('h1', 'p0', '10.0.0.2', 's1', 'eth2')", "23514"},
		// interface already cabled; address taken; unknown interface
		{"INSERT INTO endpoint_ports (endpoint, plane, address, switch, interface) VALUES ('h1', 'p1', '10.1.0.2', 's1', 'eth1')", "23505"},
		{"INSERT INTO endpoint_ports (endpoint, plane, address, switch, interface) VALUES ('h1', 'p1', '10.1.0.1', 's1', 'eth2')", "23505"},
		{"INSERT INTO endpoint_ports (endpoint, plane, address, switch, interface) VALUES ('h1', 'p1', '10.1.0.2', 's1', 'eth9')", "23503"},
		{"INSERT INTO endpoint_ports (endpoint, plane, address, switch, interface) VALUES ('h1', 'p1', '10.1.0.2', 'nope', 'eth1')", "23503"},
		{"INSERT INTO drains (target_kind, target, reason, created_by) VALUES ('plane', 'p0', 'maintenance', 'alice')", ""},
		{"INSERT INTO drains (target_kind, target, reason, created_by) VALUES ('rack', 'r0', 'x', 'alice')", "23514"},
		{"UPDATE drains SET removed_at = now()", "23514"},
		{"UPDATE drains SET removed_at = now(), removed_by = 'bob'", ""},
		{"INSERT INTO rate_classes (name, egress_bps, ingress_bps) VALUES ('gold', 100000000000, 100000000000)", ""},
		{"INSERT INTO endpoint_rate_classes (endpoint, class) VALUES ('h0', 'gold')", ""},
		{"INSERT INTO endpoint_rate_classes (endpoint, class) VALUES ('h1', 'silver')", "23503"},
		{"INSERT INTO api_tokens (name, role, hash, prefix, created_by) VALUES ('ci', 'operator', sha256('secret'), 'mp_abc', 'admin')", ""},
		{"INSERT INTO api_tokens (name, role, hash, prefix, created_by) VALUES ('root', 'god', sha256('other'), 'mp_def', 'admin')", "23514"},
		{"INSERT INTO topology_revisions (applied_by, sha256, document) VALUES ('alice', encode(sha256('{}'), 'hex'), '{}')", ""},
		{"INSERT INTO topology_revisions (applied_by, sha256, document) VALUES ('alice', 'not-a-hash', '{}')", "23514"},
		{"INSERT INTO audit_log (actor, role, method, path, action, status, result) VALUES ('alice', 'operator', 'POST', '/api/v1/drains', 'drain.create', 201, 'ok')", ""},
		{"INSERT INTO fabric_state (id) VALUES (2)", "23514"},
		{"UPDATE fabric_state SET generation = generation + 1", ""},
		// deleting an endpoint removes its ports and rate class
		{"DELETE FROM endpoints WHERE name = 'h0'", ""},
	}
	for i, s := range steps {
		_, err := db.Pool().Exec(ctx, s.sql)
		var pgErr *pgconn.PgError
		code := ""
		if errors.As(err, &pgErr) {
			code = pgErr.Code
		} else if err != nil {
			t.Fatalf("step %d %q: %v", i, s.sql, err)
		}
		if code != s.wantCode {
			t.Errorf("step %d %q: got SQLSTATE %q (%v), want %q", i, s.sql, code, err, s.wantCode)
		}
	}
	var n int
	if err := db.Pool().QueryRow(ctx, "SELECT (SELECT count(*) FROM endpoint_ports) + (SELECT count(*) FROM endpoint_rate_classes)").Scan(&n); err != nil || n != 0 {
		t.Errorf("after deleting h0: %d ports and rate classes left (%v)", n, err)
	}
	var gen int64
	if err := db.Pool().QueryRow(ctx, "SELECT generation FROM fabric_state").Scan(&gen); err != nil || gen != 1 {
		t.Errorf("generation %d (%v), want 1", gen, err)
	}
}

func TestLinksView(t *testing.T) {
	ctx := testenv.Context(t)
	db := storetest.New(t)
	for _, sql := range []string{
		"INSERT INTO planes (name) VALUES ('p0')",
		"INSERT INTO switches (name, plane, gnmi_address) VALUES ('s0', 'p0', 's0:57400')",
		"INSERT INTO switch_interfaces (switch, name, speed_bps) VALUES ('s0', 'Ethernet1', 400000000000), ('s0', 'Ethernet2', 0)",
		"INSERT INTO endpoints (name) VALUES ('h0')",
		"INSERT INTO endpoint_ports (endpoint, plane, address, switch, interface) VALUES ('h0', 'p0', '10.0.0.1', 's0', 'Ethernet1')",
	} {
		exec(t, db, sql)
	}
	rows, err := db.Pool().Query(ctx, "SELECT name, plane, switch, interface, endpoint, host(address), speed_bps FROM links")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var name, plane, sw, iface, ep, addr string
		var speed int64
		if err := rows.Scan(&name, &plane, &sw, &iface, &ep, &addr, &speed); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %s %s %s %s %s %d", name, plane, sw, iface, ep, addr, speed))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := "s0:Ethernet1 p0 s0 Ethernet1 h0 10.0.0.1 400000000000"
	if len(got) != 1 || got[0] != want {
		t.Errorf("links = %q, want [%q] (an uncabled interface is not a link)", got, want)
	}
}

func TestCollector(t *testing.T) {
	db := storetest.New(t)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(db.Collector()); err != nil {
		t.Fatal(err)
	}
	exec(t, db, "SELECT 1")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for _, f := range families {
		m := f.GetMetric()[0]
		if g := m.GetGauge(); g != nil {
			values[f.GetName()] = g.GetValue()
		}
		if c := m.GetCounter(); c != nil {
			values[f.GetName()] = c.GetValue()
		}
	}
	for _, name := range []string{
		"multiplane_store_pool_acquired_conns",
		"multiplane_store_pool_idle_conns",
		"multiplane_store_pool_total_conns",
		"multiplane_store_pool_max_conns",
		"multiplane_store_pool_acquires_total",
		"multiplane_store_pool_acquire_duration_seconds_total",
	} {
		if _, ok := values[name]; !ok {
			t.Errorf("metric %s missing", name)
		}
	}
	if values["multiplane_store_pool_max_conns"] < 1 || values["multiplane_store_pool_acquires_total"] < 1 {
		t.Errorf("implausible values: %v", values)
	}
}

func TestCloseIdempotent(t *testing.T) {
	db := storetest.New(t)
	db.Close()
	db.Close()
	if err := db.Ready(context.Background()); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Ready after Close: %v, want ErrUnavailable", err)
	}
}

// TestReadyDuringMigration: while another session holds the migration lock
// and golang-migrate has marked the version dirty, Ready says "in progress"
// (ErrNotMigrated), not "dirty, repair by hand".
func TestReadyDuringMigration(t *testing.T) {
	ctx := testenv.Context(t)
	db := storetest.New(t)
	exec(t, db, "UPDATE schema_migrations SET dirty = true")

	err := db.Ready(ctx)
	if !errors.Is(err, store.ErrDirty) {
		t.Fatalf("Ready without a migration running: got %v, want ErrDirty", err)
	}

	conn, err := db.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, $2)", store.MigrateLockClass, store.MigrateLockObj); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1, $2)", store.MigrateLockClass, store.MigrateLockObj)

	err = db.Ready(ctx)
	var se *store.SchemaError
	if !errors.Is(err, store.ErrNotMigrated) || !errors.As(err, &se) || !se.InProgress {
		t.Fatalf("Ready during a migration: got %v, want ErrNotMigrated in progress", err)
	}
	t.Logf("Ready: %v", err)
}
