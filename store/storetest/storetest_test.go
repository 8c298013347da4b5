package storetest

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/store"
)

func TestMain(m *testing.M) { Main(m) }

func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	conn, err := pgx.Connect(testenv.Context(t), server(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var ok bool
	if err := conn.QueryRow(testenv.Context(t), "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func currentDatabase(t *testing.T, db *store.DB) string {
	t.Helper()
	var name string
	if err := db.Pool().QueryRow(testenv.Context(t), "SELECT current_database()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestDatabasesAreFreshAndDropped: each New is its own migrated database,
// and it is gone once its test has finished.
func TestDatabasesAreFreshAndDropped(t *testing.T) {
	var names []string
	for _, tc := range []struct {
		name string
		new  func(testing.TB) *store.DB
		head bool
	}{
		{"migrated", New, true},
		{"migrated again", New, true},
		{"unmigrated", NewUnmigrated, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := tc.new(t)
			names = append(names, currentDatabase(t, db))
			err := db.Ready(testenv.Context(t))
			if tc.head && err != nil {
				t.Fatalf("Ready: %v", err)
			}
			if !tc.head && err == nil {
				t.Fatal("Ready on an unmigrated database succeeded")
			}
			if tc.head {
				// Nothing left over from the previous subtest.
				var n int
				if err := db.Pool().QueryRow(testenv.Context(t), "SELECT count(*) FROM planes").Scan(&n); err != nil || n != 0 {
					t.Fatalf("planes: %d rows (%v)", n, err)
				}
				if _, err := db.Pool().Exec(testenv.Context(t), "INSERT INTO planes (name) VALUES ('p0')"); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if names[0] == names[1] {
		t.Errorf("two tests got the same database %s", names[0])
	}
	for _, n := range names {
		if databaseExists(t, n) {
			t.Errorf("database %s still exists after its test", n)
		}
	}
}

func TestURL(t *testing.T) {
	u := URL(t)
	db, err := store.Open(testenv.Context(t), u, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Ready(testenv.Context(t)); err != nil {
		t.Errorf("Ready: %v", err)
	}
}

func TestDatabaseName(t *testing.T) {
	for _, tc := range []struct{ name string }{
		{"short"},
		{strings.Repeat("Very_Long-Subtest name/", 10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := databaseName(t)
			if len(n) > 63 || !strings.HasPrefix(n, "mp_test_") {
				t.Errorf("name %q (%d bytes)", n, len(n))
			}
			for _, r := range n {
				if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
					t.Errorf("name %q has %q", n, r)
				}
			}
		})
	}
}

func TestWithDatabase(t *testing.T) {
	for _, tc := range []struct{ base, want string }{
		{"postgres://u:p@db.example:5432/admin?sslmode=disable", "postgres://u:p@db.example:5432/x?sslmode=disable"},
		{"postgresql://u@/admin?host=%2Fsock", "postgresql://u@/x?host=%2Fsock"},
		{"host=/sock user=u dbname=admin", "host=/sock user=u dbname=admin dbname=x"},
	} {
		got, err := withDatabase(tc.base, "x")
		if err != nil || got != tc.want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", tc.base, got, err, tc.want)
		}
		if _, err := pgx.ParseConfig(got); err != nil {
			t.Errorf("%q does not parse: %v", got, err)
		} else if cfg, _ := pgx.ParseConfig(got); cfg.Database != "x" {
			t.Errorf("%q: database %q, want x", got, cfg.Database)
		}
	}
}
