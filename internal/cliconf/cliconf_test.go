package cliconf

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPrecedence(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfgFile, []byte("listen: 1.1.1.1:1\ndata-dir: /from-file\ntimeout: 3s\nnames: [a, b]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FD_DATA_DIR", "/from-env")
	fs := flag.NewFlagSet("fd", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "")
	dir := fs.String("data-dir", "./var", "")
	names := fs.String("names", "", "")
	other := fs.String("other", "dflt", "")
	timeout := fs.Duration("timeout", time.Second, "")
	if err := Parse(fs, []string{"--config", cfgFile, "--listen", "2.2.2.2:2"}, "FD"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ got, want string }{
		{*listen, "2.2.2.2:2"}, {*dir, "/from-env"}, {*names, "a,b"}, {*other, "dflt"}, {timeout.String(), "3s"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	unknown := filepath.Join(dir, "u.yaml")
	os.WriteFile(unknown, []byte("nope: 1\n"), 0o600)
	bad := filepath.Join(dir, "b.yaml")
	os.WriteFile(bad, []byte("n: [\n"), 0o600)
	tests := []struct {
		name, env, want string
		args            []string
	}{
		{"unknown key", "", "unknown setting", []string{"--config", unknown}},
		{"malformed", "", "config file", []string{"--config", bad}},
		{"missing file", "", "no such file", []string{"--config", filepath.Join(dir, "none")}},
		{"bad env", "FD_N=x", "FD_N", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				k, v, _ := strings.Cut(tc.env, "=")
				t.Setenv(k, v)
			}
			fs := flag.NewFlagSet("fd", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			fs.Int("n", 0, "")
			err := Parse(fs, tc.args, "FD")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestUsageListsEnvTwins(t *testing.T) {
	fs := flag.NewFlagSet("fd", flag.ContinueOnError)
	var b strings.Builder
	fs.SetOutput(&b)
	fs.String("data-dir", "./var", "where data lives")
	Parse(fs, []string{"--help"}, "FD")
	for _, want := range []string{"--data-dir", "where data lives", "env: FD_DATA_DIR", "env: FD_CONFIG"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, b.String())
		}
	}
}
