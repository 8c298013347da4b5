package daemon

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/multiplane/multiplane/audit"
	"github.com/multiplane/multiplane/auth"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/store"
	"github.com/multiplane/multiplane/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// TestMintAdminTokenExternalDatabase: with --database-url, admin-token
// mints a working admin token, prints or writes it, and audits it.
func TestMintAdminTokenExternalDatabase(t *testing.T) {
	url := storetest.URL(t)
	ctx := testenv.Context(t)
	db, err := store.Open(ctx, url, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tokens := auth.NewTokens(db.Pool())

	var out bytes.Buffer
	if err := MintAdminToken(ctx, AdminTokenConfig{DatabaseURL: url, TTL: time.Hour}, &out, testenv.Logger(t)); err != nil {
		t.Fatal(err)
	}
	printed := strings.TrimSpace(out.String())
	p, err := tokens.Authenticate(ctx, printed)
	if err != nil || p.Role != auth.RoleAdmin || !strings.HasPrefix(p.Name, "recovery-") {
		t.Fatalf("printed token: %+v, %v", p, err)
	}

	file := filepath.Join(t.TempDir(), "recovered.token")
	out.Reset()
	if err := MintAdminToken(ctx, AdminTokenConfig{DatabaseURL: url, Out: file, Name: "second"}, &out, testenv.Logger(t)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "mpt_") {
		t.Fatalf("secret printed although --token-file was given: %q", out.String())
	}
	data, err := os.ReadFile(file)
	if fi, _ := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, mode %v", err, fi.Mode())
	}
	if p, err := tokens.Authenticate(ctx, strings.TrimSpace(string(data))); err != nil || p.Name != "second" || p.Role != auth.RoleAdmin {
		t.Fatalf("written token: %+v, %v", p, err)
	}

	entries, err := audit.New(db.Pool()).List(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var audited []string
	for _, e := range entries {
		if e.Actor == AdminTokenActor {
			audited = append(audited, e.Target)
		}
	}
	if len(audited) != 2 || !strings.Contains(audited[0], "second") {
		t.Fatalf("audit entries of %q: %q, want two, newest naming token second", AdminTokenActor, audited)
	}

	if err := MintAdminToken(ctx, AdminTokenConfig{DatabaseURL: url, TTL: -time.Second}, &out, testenv.Logger(t)); err == nil {
		t.Fatal("negative --token-ttl accepted")
	}
}

// TestAdminTokenConfigValidate: admin-token refuses bad --token-name and
// --token-ttl values up front, naming the flag, with auth's sentinels.
func TestAdminTokenConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     AdminTokenConfig
		flag    string
		wantErr error
	}{
		{"defaults", AdminTokenConfig{}, "", nil},
		{"longest name and ttl", AdminTokenConfig{Name: strings.Repeat("é", auth.MaxNameBytes/2), TTL: auth.MaxTTL}, "", nil},
		{"control character", AdminTokenConfig{Name: "a\x01b"}, "--token-name", auth.ErrInvalidName},
		{"newline", AdminTokenConfig{Name: "ops\nforged log line"}, "--token-name", auth.ErrInvalidName},
		{"NUL", AdminTokenConfig{Name: "a\x00"}, "--token-name", auth.ErrInvalidName},
		{"invalid UTF-8", AdminTokenConfig{Name: "a\xffb"}, "--token-name", auth.ErrInvalidName},
		{"5000 bytes", AdminTokenConfig{Name: strings.Repeat("a", 5000)}, "--token-name", auth.ErrInvalidName},
		{"one byte too long", AdminTokenConfig{Name: strings.Repeat("a", auth.MaxNameBytes+1)}, "--token-name", auth.ErrInvalidName},
		{"2562047h", AdminTokenConfig{TTL: 2562047 * time.Hour}, "--token-ttl", auth.ErrInvalidTTL},
		{"just over 10 years", AdminTokenConfig{TTL: auth.MaxTTL + time.Second}, "--token-ttl", auth.ErrInvalidTTL},
		{"negative", AdminTokenConfig{TTL: -time.Second}, "--token-ttl", auth.ErrInvalidTTL},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.flag) {
				t.Fatalf("Validate: %v, want %v naming %s", err, tc.wantErr, tc.flag)
			}
			// MintAdminToken checks first: no PostgreSQL is started
			// from the (missing) data directory.
			cfg := tc.cfg
			cfg.DataDir = filepath.Join(t.TempDir(), "missing")
			if err := MintAdminToken(testenv.Context(t), cfg, io.Discard, testenv.Logger(t)); !errors.Is(err, tc.wantErr) {
				t.Fatalf("MintAdminToken: %v, want %v", err, tc.wantErr)
			}
		})
	}
}
