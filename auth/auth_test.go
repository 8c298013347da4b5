package auth_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/multiplane/multiplane/auth"
	"github.com/multiplane/multiplane/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func TestRolesAllow(t *testing.T) {
	tests := []struct {
		have, need auth.Role
		ok         bool
	}{
		{auth.RoleViewer, auth.RoleViewer, true}, {auth.RoleViewer, auth.RoleOperator, false},
		{auth.RoleOperator, auth.RoleViewer, true}, {auth.RoleOperator, auth.RoleAdmin, false},
		{auth.RoleAdmin, auth.RoleOperator, true}, {"", auth.RoleViewer, false}, {"root", auth.RoleViewer, false},
	}
	for _, tc := range tests {
		if got := tc.have.Allows(tc.need); got != tc.ok {
			t.Errorf("%q.Allows(%q) = %v", tc.have, tc.need, got)
		}
	}
}

func TestTokens(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	ts := auth.NewTokens(db.Pool())
	secret, tok, err := ts.Mint(ctx, "ops", auth.RoleOperator, "test", 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ts.Authenticate(ctx, secret)
	if err != nil || p.Name != "ops" || p.Role != auth.RoleOperator || p.TokenID != tok.ID {
		t.Fatalf("Authenticate = %+v, %v", p, err)
	}
	var stored []byte
	db.Pool().QueryRow(ctx, `SELECT hash FROM api_tokens WHERE id = $1`, tok.ID).Scan(&stored)
	if string(stored) == secret || len(stored) != 32 {
		t.Fatal("secret is not stored as a SHA-256 hash")
	}
	for _, bad := range []string{"", "mpt_", secret + "x", "Bearer " + secret} {
		if _, err := ts.Authenticate(ctx, bad); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("Authenticate(%q) = %v", bad, err)
		}
	}
	short, _, _ := ts.Mint(ctx, "short", auth.RoleViewer, "test", time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := ts.Authenticate(ctx, short); errors.Is(err, auth.ErrUnauthenticated) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("expired token still accepted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, _, err := ts.Mint(ctx, "ops", auth.RoleViewer, "test", 0); !errors.Is(err, auth.ErrDuplicateName) {
		t.Fatalf("duplicate = %v", err)
	}
	if _, _, err := ts.Mint(ctx, "x", "root", "test", 0); !errors.Is(err, auth.ErrInvalidRole) {
		t.Fatalf("bad role = %v", err)
	}
	if err := ts.Revoke(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Authenticate(ctx, secret); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("revoked token = %v", err)
	}
	if err := ts.Revoke(ctx, tok.ID); !errors.Is(err, auth.ErrNotFound) {
		t.Fatalf("revoke twice = %v", err)
	}
}

func TestEnsureAdminOnce(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	ts := auth.NewTokens(db.Pool())
	path := filepath.Join(t.TempDir(), "admin.token")
	created, err := ts.EnsureAdmin(ctx, path)
	if err != nil || !created {
		t.Fatalf("first EnsureAdmin = %v, %v", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin.token: %v mode %v", err, fi.Mode())
	}
	data, _ := os.ReadFile(path)
	p, err := ts.Authenticate(ctx, string(data[:len(data)-1]))
	if err != nil || p.Role != auth.RoleAdmin {
		t.Fatalf("admin token: %+v %v", p, err)
	}
	if created, err := ts.EnsureAdmin(ctx, path); err != nil || created {
		t.Fatalf("second EnsureAdmin = %v, %v", created, err)
	}
}
