// Package auth issues and checks the bearer tokens of the REST API. A token
// has a role: viewer (read), operator (read, drains, rate classes) or admin
// (everything, including topology and tokens). Only a SHA-256 hash of each
// secret is stored; the secret is shown once, when minted.
//
//	tokens := auth.NewTokens(pool)
//	secret, tok, err := tokens.Mint(ctx, "ci-bot", auth.RoleViewer, "admin", 0)
//	principal, err := tokens.Authenticate(ctx, secret)
//	ok := principal.Role.Allows(auth.RoleOperator)
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Errors a caller maps to HTTP statuses.
var (
	ErrUnauthenticated = errors.New("auth: missing or invalid token")
	ErrForbidden       = errors.New("auth: role does not allow this")
	ErrInvalidRole     = errors.New("auth: unknown role")
	ErrDuplicateName   = errors.New("auth: a token with this name exists")
	ErrNotFound        = errors.New("auth: no such token")
	// ErrLastAdmin: the token is the last live (unrevoked, unexpired) admin
	// token; revoking it would lock every admin out.
	ErrLastAdmin = errors.New("auth: refusing to revoke the last live admin token")
	// ErrInvalidName: a token name is empty, longer than MaxNameBytes, or
	// not printable UTF-8 text.
	ErrInvalidName = errors.New("auth: a token name is 1 to 64 bytes of printable UTF-8 text")
	// ErrInvalidTTL: a lifetime below 0 or above MaxTTL.
	ErrInvalidTTL = errors.New("auth: a token lifetime is 0 (no expiry) or at most 10 years")
)

// Role is what a token may do.
type Role string

// Roles, from least to most privileged.
const (
	RoleViewer   Role = "viewer"
	RoleOperator Role = "operator"
	RoleAdmin    Role = "admin"
)

func (r Role) rank() int {
	switch r {
	case RoleViewer:
		return 1
	case RoleOperator:
		return 2
	case RoleAdmin:
		return 3
	}
	return 0
}

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return r.rank() > 0 }

// Allows reports whether r is at least need.
func (r Role) Allows(need Role) bool { return r.Valid() && r.rank() >= need.rank() }

// Principal is who made a request.
type Principal struct {
	TokenID int64
	Name    string
	Role    Role
}

// Token is a token's public record.
type Token struct {
	ID         int64      `json:"id"`
	Name       string     `json:"name"`
	Role       Role       `json:"role"`
	Prefix     string     `json:"prefix"`
	CreatedBy  string     `json:"created_by"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
}

const secretPrefix = "mpt_"

// Tokens stores tokens in PostgreSQL.
// Tokens that authenticated are remembered for CacheTTL, so a busy client
// costs no database look-up per request; Revoke forgets them at once, and
// a revocation by another process takes effect within CacheTTL. Only valid
// tokens are remembered: a client without one cannot fill the cache.
type Tokens struct {
	pool *pgxpool.Pool

	mu    sync.Mutex
	cache map[[sha256.Size]byte]cachedPrincipal
	epoch uint64 // bumped by forget: a look-up begun before is not remembered
}

type cachedPrincipal struct {
	p     Principal
	until time.Time
}

// CacheTTL bounds how long an authenticated token is taken on trust.
const CacheTTL = time.Second

const maxCached = 4096

// NewTokens returns a token store over a migrated database.
func NewTokens(pool *pgxpool.Pool) *Tokens {
	return &Tokens{pool: pool, cache: map[[sha256.Size]byte]cachedPrincipal{}}
}

func hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// Cached returns the principal of secret if it authenticated within
// CacheTTL, without a database look-up.
func (ts *Tokens) Cached(secret string) (Principal, bool) {
	p, ok, _ := ts.cached(secret)
	return p, ok
}

func (ts *Tokens) cached(secret string) (Principal, bool, uint64) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	c, ok := ts.cache[sha256.Sum256([]byte(secret))]
	if !ok || !time.Now().Before(c.until) {
		return Principal{}, false, ts.epoch
	}
	return c.p, true, ts.epoch
}

func (ts *Tokens) remember(secret string, p Principal, expires *time.Time, epoch uint64) {
	until := time.Now().Add(CacheTTL)
	if expires != nil && expires.Before(until) {
		until = *expires
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if epoch != ts.epoch {
		return
	}
	if len(ts.cache) >= maxCached {
		now := time.Now()
		for k, c := range ts.cache {
			if !now.Before(c.until) {
				delete(ts.cache, k)
			}
		}
		if len(ts.cache) >= maxCached {
			clear(ts.cache)
		}
	}
	ts.cache[sha256.Sum256([]byte(secret))] = cachedPrincipal{p: p, until: until}
}

func (ts *Tokens) forget() {
	ts.mu.Lock()
	clear(ts.cache)
	ts.epoch++
	ts.mu.Unlock()
}

// Mint creates a token and returns its secret, which is not stored.
// ttl 0 means it does not expire.
func (ts *Tokens) Mint(ctx context.Context, name string, role Role, createdBy string, ttl time.Duration) (string, Token, error) {
	switch {
	case !role.Valid():
		return "", Token{}, fmt.Errorf("%w %q (viewer, operator or admin)", ErrInvalidRole, role)
	case !validName(name):
		return "", Token{}, ErrInvalidName
	case ttl < 0 || ttl > MaxTTL:
		return "", Token{}, ErrInvalidTTL
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", Token{}, fmt.Errorf("auth: %w", err)
	}
	secret := secretPrefix + base64.RawURLEncoding.EncodeToString(buf)
	t := Token{Name: name, Role: role, Prefix: secret[:len(secretPrefix)+6], CreatedBy: createdBy}
	var expires *time.Time
	if ttl > 0 {
		e := time.Now().Add(ttl)
		expires = &e
	}
	err := ts.pool.QueryRow(ctx, `INSERT INTO api_tokens (name, role, hash, prefix, created_by, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING id, created_at, expires_at`,
		name, string(role), hash(secret), t.Prefix, createdBy, expires).Scan(&t.ID, &t.CreatedAt, &t.ExpiresAt)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return "", Token{}, fmt.Errorf("%w: %q", ErrDuplicateName, name)
	}
	if err != nil {
		return "", Token{}, fmt.Errorf("auth: mint token: %w", err)
	}
	return secret, t, nil
}

// Authenticate returns the principal of a valid, unexpired, unrevoked secret.
func (ts *Tokens) Authenticate(ctx context.Context, secret string) (Principal, error) {
	if !strings.HasPrefix(secret, secretPrefix) || len(secret) > 128 {
		return Principal{}, ErrUnauthenticated
	}
	p, ok, epoch := ts.cached(secret)
	if ok {
		return p, nil
	}
	var role string
	var lastUsed, expires *time.Time
	err := ts.pool.QueryRow(ctx, `SELECT id, name, role, last_used_at, expires_at FROM api_tokens
		WHERE hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`,
		hash(secret)).Scan(&p.TokenID, &p.Name, &role, &lastUsed, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return Principal{}, ErrUnauthenticated
	}
	if err != nil {
		return Principal{}, fmt.Errorf("auth: authenticate: %w", err)
	}
	// Record use at most once a minute, so reads stay reads.
	if lastUsed == nil || time.Since(*lastUsed) > time.Minute {
		if _, err := ts.pool.Exec(ctx, `UPDATE api_tokens SET last_used_at = now() WHERE id = $1`, p.TokenID); err != nil {
			return Principal{}, fmt.Errorf("auth: authenticate: %w", err)
		}
	}
	p.Role = Role(role)
	ts.remember(secret, p, expires, epoch)
	return p, nil
}

// List returns every token, newest first.
func (ts *Tokens) List(ctx context.Context) ([]Token, error) {
	rows, err := ts.pool.Query(ctx, `SELECT id, name, role, prefix, created_by, created_at, expires_at, revoked_at, last_used_at
		FROM api_tokens ORDER BY id DESC`)
	if err != nil {
		return nil, fmt.Errorf("auth: list tokens: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Token, error) {
		var t Token
		err := r.Scan(&t.ID, &t.Name, &t.Role, &t.Prefix, &t.CreatedBy, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt, &t.LastUsedAt)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("auth: list tokens: %w", err)
	}
	return out, nil
}

// liveAdmin is the SQL condition of a live admin token.
const liveAdmin = `role = 'admin' AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`

// revokeLock is the advisory transaction lock (pg_advisory_xact_lock(int4,
// int4)) that serialises revocations, so that two concurrent revocations
// of the last two admin tokens cannot both succeed.
const (
	revokeLockClass = 0x6d706c6e // "mpln", as store's migration lock
	revokeLockObj   = 2
)

// Revoke revokes a token by id. It refuses (ErrLastAdmin) to revoke the last
// live admin token: the check and the update run in one transaction under
// an advisory lock, so concurrent revocations see each other. Revoking an
// admin token that has already expired is always allowed.
func (ts *Tokens) Revoke(ctx context.Context, id int64) error {
	err := pgx.BeginFunc(ctx, ts.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, revokeLockClass, revokeLockObj); err != nil {
			return err
		}
		var targetLive bool
		var live int
		err := tx.QueryRow(ctx, `SELECT t.role = 'admin' AND (t.expires_at IS NULL OR t.expires_at > now()),
			(SELECT count(*) FROM api_tokens WHERE `+liveAdmin+`)
			FROM api_tokens t WHERE t.id = $1 AND t.revoked_at IS NULL`, id).Scan(&targetLive, &live)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: id %d", ErrNotFound, id)
		}
		if err != nil {
			return err
		}
		if targetLive && live <= 1 {
			return fmt.Errorf("%w (id %d); mint another admin token first, or run `fabricd admin-token` on the server", ErrLastAdmin, id)
		}
		_, err = tx.Exec(ctx, `UPDATE api_tokens SET revoked_at = now() WHERE id = $1`, id)
		return err
	})
	ts.forget()
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrLastAdmin) {
		return fmt.Errorf("auth: revoke: %w", err)
	}
	return err
}

// LiveAdmins counts the live (unrevoked, unexpired) admin tokens.
func (ts *Tokens) LiveAdmins(ctx context.Context) (int, error) {
	var n int
	if err := ts.pool.QueryRow(ctx, `SELECT count(*) FROM api_tokens WHERE `+liveAdmin).Scan(&n); err != nil {
		return 0, fmt.Errorf("auth: count admin tokens: %w", err)
	}
	return n, nil
}

// EnsureAdmin mints the first admin token when no token exists yet (the
// first start) and writes its secret to path (mode 0600). It returns
// whether it did.
//
// It deliberately counts every token, revoked and expired ones included:
// once tokens have been issued, a start never mints an admin token on its
// own, so neither an expired admin token nor a restart silently replaces
// the secret in path with a new, never-expiring one. Revoke keeps at least
// one live admin token; when every admin token has expired, the operator
// mints a new one locally with `fabricd admin-token` (MintRecovery), which
// fabricd points to at start (see LiveAdmins).
func (ts *Tokens) EnsureAdmin(ctx context.Context, path string) (bool, error) {
	var n int
	if err := ts.pool.QueryRow(ctx, `SELECT count(*) FROM api_tokens`).Scan(&n); err != nil {
		return false, fmt.Errorf("auth: count tokens: %w", err)
	}
	if n > 0 {
		return false, nil
	}
	secret, _, err := ts.Mint(ctx, "admin", RoleAdmin, "fabricd", 0)
	if err != nil {
		return false, err
	}
	if err := WriteSecret(path, secret); err != nil {
		// Without the file nobody could use the token: take it back.
		ts.discard(ctx, secret)
		return false, err
	}
	return true, nil
}

// MintRecovery mints an admin token outside the API, for an operator with
// access to the server (fabricd admin-token), and calls record (the audit
// log) with it. If record fails, the token is taken back and the error
// returned: a recovery token never exists unaudited.
func (ts *Tokens) MintRecovery(ctx context.Context, name, createdBy string, ttl time.Duration, record func(context.Context, Token) error) (string, Token, error) {
	secret, tok, err := ts.Mint(ctx, name, RoleAdmin, createdBy, ttl)
	if err != nil {
		return "", Token{}, err
	}
	if err := record(ctx, tok); err != nil {
		ts.discard(ctx, secret)
		return "", Token{}, err
	}
	return secret, tok, nil
}

// Bounds of a token's name and lifetime, for every way of minting one.
const (
	MaxNameBytes = 64
	MaxTTL       = 10 * 365 * 24 * time.Hour
)

func validName(name string) bool {
	if name == "" || len(name) > MaxNameBytes || !utf8.ValidString(name) {
		return false
	}
	for _, r := range name {
		if unicode.IsControl(r) || r == utf8.RuneError || r == '\ufffe' {
			return false
		}
	}
	return true
}

// discard deletes a token whose secret nobody has seen.
func (ts *Tokens) discard(ctx context.Context, secret string) {
	_, _ = ts.pool.Exec(context.WithoutCancel(ctx), `DELETE FROM api_tokens WHERE hash = $1`, hash(secret))
	ts.forget()
}

// WriteSecret writes a token's secret to path, mode 0600, atomically
// (a temporary file renamed over path), creating the directory (0700).
func WriteSecret(path, secret string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	tmp := path + ".tmp"
	_ = os.Remove(tmp) // WriteFile keeps the mode of an existing file
	if err := os.WriteFile(tmp, []byte(secret+"\n"), 0o600); err != nil {
		return fmt.Errorf("auth: write admin token: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("auth: write admin token: %w", err)
	}
	return nil
}
