package store_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/store"
	"github.com/multiplane/multiplane/store/storetest"
)

var update = flag.Bool("update", false, "rewrite testdata/schema.golden from the migrated schema")

const goldenPath = "testdata/schema.golden"

// TestSchemaSnapshot migrates an empty database to head and compares its
// schema with testdata/schema.golden. After adding a migration, run
//
//	go test ./store -run Schema -update
//
// and review the golden file's diff with the migration.
func TestSchemaSnapshot(t *testing.T) {
	ctx := testenv.Context(t)
	db := storetest.NewUnmigrated(t)
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := dumpSchema(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.MkdirAll(filepath.Dir(goldenPath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(goldenPath, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", goldenPath)
		return
	}
	want, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatalf("%v (create it with: go test ./store -run Schema -update)", err)
	}
	if got != string(want) {
		t.Errorf("schema differs from %s (if the change is intended: go test ./store -run Schema -update):\n%s",
			goldenPath, lineDiff(string(want), got))
	}
}

// schemaQueries dump the public schema from the catalogs, each row one
// line, in a fixed order. Names of constraints and indexes are part of the
// schema others see in errors, so they are included.
var schemaQueries = []struct{ section, sql string }{
	{"tables", `
		SELECT table_name || ' ' || table_type
		FROM information_schema.tables
		WHERE table_schema = 'public'
		ORDER BY table_name`},
	{"columns", `
		SELECT table_name || '.' || column_name || ' ' || format_type(a.atttypid, a.atttypmod)
			|| CASE WHEN c.is_nullable = 'NO' THEN ' NOT NULL' ELSE '' END
			|| COALESCE(' DEFAULT ' || c.column_default, '')
		FROM information_schema.columns c
		JOIN pg_attribute a ON a.attrelid = format('%I.%I', c.table_schema, c.table_name)::regclass
			AND a.attname = c.column_name
		WHERE c.table_schema = 'public'
		ORDER BY c.table_name, c.ordinal_position`},
	{"constraints", `
		SELECT cl.relname || ' ' || co.conname || ' ' || pg_get_constraintdef(co.oid, true)
		FROM pg_constraint co
		JOIN pg_class cl ON cl.oid = co.conrelid
		JOIN pg_namespace n ON n.oid = cl.relnamespace
		WHERE n.nspname = 'public'
		ORDER BY cl.relname, co.conname`},
	{"indexes", `
		SELECT tablename || ' ' || indexname || ' ' || indexdef
		FROM pg_indexes
		WHERE schemaname = 'public'
		ORDER BY tablename, indexname`},
	{"sequences", `
		SELECT sequence_name || ' ' || data_type
		FROM information_schema.sequences
		WHERE sequence_schema = 'public'
		ORDER BY sequence_name`},
	{"views", `
		SELECT viewname || E':\n' || pg_get_viewdef(format('%I.%I', schemaname, viewname)::regclass, true)
		FROM pg_views
		WHERE schemaname = 'public'
		ORDER BY viewname`},
	{"triggers", `
		SELECT pg_get_triggerdef(t.oid, true)
		FROM pg_trigger t
		JOIN pg_class cl ON cl.oid = t.tgrelid
		JOIN pg_namespace n ON n.oid = cl.relnamespace
		WHERE n.nspname = 'public' AND NOT t.tgisinternal
		ORDER BY cl.relname, t.tgname`},
	{"functions", `
		SELECT pg_get_functiondef(p.oid)
		FROM pg_proc p
		JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'public'
		ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)`},
	{"rows", `
		SELECT 'fabric_state ' || row_to_json(f)::text FROM fabric_state f
		UNION ALL
		SELECT 'schema_migrations ' || row_to_json(m)::text FROM schema_migrations m`},
}

func dumpSchema(ctx context.Context, db *store.DB) (string, error) {
	var b strings.Builder
	b.WriteString("# Schema of a database migrated to head, dumped by TestSchemaSnapshot.\n")
	b.WriteString("# Regenerate with: go test ./store -run Schema -update\n")
	for _, q := range schemaQueries {
		fmt.Fprintf(&b, "\n## %s\n", q.section)
		rows, err := db.Pool().Query(ctx, q.sql)
		if err != nil {
			return "", fmt.Errorf("%s: %w", q.section, err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				rows.Close()
				return "", fmt.Errorf("%s: %w", q.section, err)
			}
			b.WriteString(strings.TrimRight(line, "\n"))
			b.WriteByte('\n')
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return "", fmt.Errorf("%s: %w", q.section, err)
		}
	}
	return b.String(), nil
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	count := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[l]++
		}
		return m
	}
	w, g := count(want), count(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if g[l] < w[l] {
			fmt.Fprintf(&b, "- %s\n", l)
			w[l]--
		}
	}
	w = count(want)
	for _, l := range strings.Split(got, "\n") {
		if w[l] < g[l] {
			fmt.Fprintf(&b, "+ %s\n", l)
			g[l]--
		}
	}
	return b.String()
}
