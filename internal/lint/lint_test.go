package lint

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOnePackageDocComment walks the module and requires exactly one file
// with a package doc comment in every non-test package.
func TestOnePackageDocComment(t *testing.T) {
	root := "../.."
	dirs := map[string][]string{} // dir → files with a doc comment
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "var" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" && filepath.Dir(path) == root {
			return nil
		}
		dir := filepath.Dir(path)
		seen[dir] = true
		if f.Doc != nil {
			dirs[dir] = append(dirs[dir], filepath.Base(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) < 10 {
		t.Fatalf("found only %d packages; is the walk rooted right?", len(seen))
	}
	for dir := range seen {
		rel, _ := filepath.Rel(root, dir)
		switch n := len(dirs[dir]); {
		case n == 0:
			t.Errorf("package %s has no package doc comment", rel)
		case n > 1:
			t.Errorf("package %s has %d package doc comments (%v); keep one", rel, n, dirs[dir])
		}
	}
}
