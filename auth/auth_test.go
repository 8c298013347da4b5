package auth_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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

func TestRevokeKeepsALiveAdmin(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	ts := auth.NewTokens(db.Pool())
	_, a, _ := ts.Mint(ctx, "a", auth.RoleAdmin, "test", 0)
	_, viewer, _ := ts.Mint(ctx, "viewer", auth.RoleViewer, "test", 0)
	if err := ts.Revoke(ctx, a.ID); !errors.Is(err, auth.ErrLastAdmin) {
		t.Fatalf("revoke the only admin = %v, want ErrLastAdmin", err)
	}
	if err := ts.Revoke(ctx, viewer.ID); err != nil {
		t.Fatalf("revoke a viewer = %v", err)
	}
	// An expired admin token does not count as live, and may be revoked.
	expired, e, _ := ts.Mint(ctx, "expired", auth.RoleAdmin, "test", time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for _, err := ts.Authenticate(ctx, expired); !errors.Is(err, auth.ErrUnauthenticated); _, err = ts.Authenticate(ctx, expired) {
		if time.Now().After(deadline) {
			t.Fatal("token not expired after 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n, err := ts.LiveAdmins(ctx); err != nil || n != 1 {
		t.Fatalf("LiveAdmins = %d, %v; want 1", n, err)
	}
	if err := ts.Revoke(ctx, a.ID); !errors.Is(err, auth.ErrLastAdmin) {
		t.Fatalf("revoke the only live admin beside an expired one = %v, want ErrLastAdmin", err)
	}
	if err := ts.Revoke(ctx, e.ID); err != nil {
		t.Fatalf("revoke an expired admin = %v", err)
	}
	_, b, _ := ts.Mint(ctx, "b", auth.RoleAdmin, "test", 0)
	if err := ts.Revoke(ctx, a.ID); err != nil {
		t.Fatalf("revoke one of two admins = %v", err)
	}
	if err := ts.Revoke(ctx, b.ID); !errors.Is(err, auth.ErrLastAdmin) {
		t.Fatalf("revoke the remaining admin = %v, want ErrLastAdmin", err)
	}
	if err := ts.Revoke(ctx, 1<<40); !errors.Is(err, auth.ErrNotFound) {
		t.Fatalf("revoke unknown = %v", err)
	}
}

// TestRevokeConcurrentLastAdmins revokes both of two admin tokens at once,
// many times: exactly one revocation may win.
func TestRevokeConcurrentLastAdmins(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	ts := auth.NewTokens(db.Pool())
	mint := func(name string) int64 {
		_, tok, err := ts.Mint(ctx, name, auth.RoleAdmin, "test", 0)
		if err != nil {
			t.Fatal(err)
		}
		return tok.ID
	}
	survivor := mint("first")
	for round := range 30 {
		ids := [2]int64{survivor, mint(fmt.Sprintf("admin-%d", round))}
		start := make(chan struct{})
		var errs [2]error
		var wg sync.WaitGroup
		for i := range ids {
			wg.Go(func() { <-start; errs[i] = ts.Revoke(ctx, ids[i]) })
		}
		close(start)
		wg.Wait()
		if n, err := ts.LiveAdmins(ctx); err != nil || n != 1 {
			t.Fatalf("round %d: %d live admins after two concurrent revocations (%v, %v), want 1 (%v)", round, n, errs[0], errs[1], err)
		}
		refused := 0
		for i, err := range errs {
			if errors.Is(err, auth.ErrLastAdmin) {
				refused++
				survivor = ids[i]
			} else if err != nil {
				t.Fatalf("round %d: revoke = %v", round, err)
			}
		}
		if refused != 1 {
			t.Fatalf("round %d: %d revocations refused, want 1", round, refused)
		}
	}
}

func TestEnsureAdminDoesNotReplaceExpiredAdmin(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	ts := auth.NewTokens(db.Pool())
	path := filepath.Join(t.TempDir(), "admin.token")
	if _, _, err := ts.Mint(ctx, "admin", auth.RoleAdmin, "test", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for n, _ := ts.LiveAdmins(ctx); n != 0; n, _ = ts.LiveAdmins(ctx) {
		if time.Now().After(deadline) {
			t.Fatal("admin token not expired after 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if created, err := ts.EnsureAdmin(ctx, path); err != nil || created {
		t.Fatalf("EnsureAdmin with only an expired admin = %v, %v; want no new token", created, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("admin.token written: %v", err)
	}
}

func TestMintRecovery(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	ts := auth.NewTokens(db.Pool())
	var recorded []auth.Token
	record := func(_ context.Context, tok auth.Token) error { recorded = append(recorded, tok); return nil }
	secret, tok, err := ts.MintRecovery(ctx, "recovery", "fabricd admin-token (local)", 0, record)
	if err != nil {
		t.Fatal(err)
	}
	if len(recorded) != 1 || recorded[0].ID != tok.ID {
		t.Fatalf("recorded %+v, want token %d", recorded, tok.ID)
	}
	if p, err := ts.Authenticate(ctx, secret); err != nil || p.Role != auth.RoleAdmin {
		t.Fatalf("recovery token: %+v, %v", p, err)
	}
	boom := errors.New("audit down")
	_, _, err = ts.MintRecovery(ctx, "unaudited", "test", 0, func(context.Context, auth.Token) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("MintRecovery with failing record = %v", err)
	}
	toks, _ := ts.List(ctx)
	for _, tk := range toks {
		if tk.Name == "unaudited" {
			t.Fatal("a token whose audit record failed was kept")
		}
	}
}

// A token remembered as good is refused once it expires, not CacheTTL later.
func TestCachedTokenExpires(t *testing.T) {
	ts := auth.NewTokens(storetest.New(t).Pool())
	ctx := context.Background()
	secret, tok, err := ts.Mint(ctx, "brief", auth.RoleViewer, "test", 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(tok.ExpiresAt.Add(-300 * time.Millisecond)))
	if _, err := ts.Authenticate(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if _, ok := ts.Cached(secret); !ok {
		t.Fatal("a token that just authenticated is not remembered")
	}
	time.Sleep(time.Until(tok.ExpiresAt.Add(50 * time.Millisecond)))
	if _, err := ts.Authenticate(ctx, secret); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("50 ms after it expired: %v, want ErrUnauthenticated", err)
	}
}
