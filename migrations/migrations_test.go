package migrations_test

import (
	"io/fs"
	"regexp"
	"strconv"
	"testing"

	"github.com/multiplane/multiplane/migrations"
)

var fileName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.(up|down)\.sql$`)

// TestFileNames checks that every migration is named NNNN_name.up.sql, has a
// matching .down.sql, and that the numbers run from 1 without gaps.
func TestFileNames(t *testing.T) {
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	type pair struct {
		name     string
		up, down bool
	}
	byVersion := map[int]*pair{}
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			t.Errorf("%s: not a migration file name (want NNNN_name.up.sql or NNNN_name.down.sql)", e.Name())
			continue
		}
		v, _ := strconv.Atoi(m[1])
		p := byVersion[v]
		if p == nil {
			p = &pair{name: m[2]}
			byVersion[v] = p
		}
		if p.name != m[2] {
			t.Errorf("%s: version %d already used by %q", e.Name(), v, p.name)
		}
		switch m[3] {
		case "up":
			p.up = true
		case "down":
			p.down = true
		}
	}
	if len(byVersion) == 0 {
		t.Fatal("no migrations embedded")
	}
	for v := 1; v <= len(byVersion); v++ {
		p := byVersion[v]
		if p == nil {
			t.Errorf("version %04d missing: versions must run from 0001 without gaps", v)
			continue
		}
		if !p.up || !p.down {
			t.Errorf("version %04d_%s: want both .up.sql and .down.sql (up=%v down=%v)", v, p.name, p.up, p.down)
		}
	}
}
