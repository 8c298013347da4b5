// Package enrollment gives endpoint agents their identity: an operator
// mints a one-time, expiring bootstrap token for one endpoint name; the
// agent trades it, with a certificate request for a key it made, for a
// client certificate of fabricd's CA (CN = the endpoint) and an etcd user
// of that name confined to its own keys (Perms). Certificates renew with
// the current one; Revoke ends an endpoint's certificates, its etcd user
// and its open etcd streams at once.
//
//	svc := enrollment.New(pool, ca, etcdClient, gate, known, enrollment.Config{EtcdURLs: urls})
//	secret, tok, err := svc.MintToken(ctx, "host-a", time.Hour, "alice")
//	creds, err := svc.Enroll(ctx, secret, "host-a", csrPEM) // from the agent
//	n, err := svc.Revoke(ctx, "host-a")
package enrollment

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/kv"
	"github.com/multiplane/multiplane/pki"
)

// Errors.
var (
	ErrDisabled        = errors.New("enrollment: disabled: etcd is not reachable beyond this host (set --etcd-listen to a routable address, or --advertise-etcd for an external cluster)")
	ErrUnknownEndpoint = errors.New("enrollment: no such endpoint in the topology")
	ErrReservedName    = errors.New("enrollment: reserved endpoint name")
	ErrInvalidTTL      = errors.New("enrollment: invalid ttl")
	ErrInvalidToken    = errors.New("enrollment: bootstrap token is unknown, used, expired or for another endpoint")
	ErrRevoked         = errors.New("enrollment: certificate unknown, expired or revoked")
)

// Bounds.
const (
	DefaultTokenTTL = time.Hour
	MaxTokenTTL     = 7 * 24 * time.Hour
	DefaultCertTTL  = 30 * 24 * time.Hour
	MinCertTTL      = time.Minute
	tokenPrefix     = "mpe_" // bootstrap tokens; API tokens are mpt_
	maxTokenBytes   = 128
	maxCSRBytes     = 8 << 10
)

// Config configures the service.
type Config struct {
	// EtcdURLs are the etcd client URLs given to enrolled endpoints; none
	// disables enrollment (ErrDisabled).
	EtcdURLs []string
	// CertTTL is the lifetime of an endpoint certificate (default 30 days).
	CertTTL time.Duration
}

// Known reports whether an endpoint is in the topology.
type Known func(ctx context.Context, name string) (bool, error)

// Service issues and revokes endpoint credentials.
type Service struct {
	pool  *pgxpool.Pool
	ca    *pki.CA
	etcd  *clientv3.Client
	gate  *kv.Gate
	known Known
	cfg   Config
}

// New returns the service; gate may be nil (an external etcd).
func New(pool *pgxpool.Pool, ca *pki.CA, etcd *clientv3.Client, gate *kv.Gate, known Known, cfg Config) *Service {
	if cfg.CertTTL <= 0 {
		cfg.CertTTL = DefaultCertTTL
	}
	return &Service{pool: pool, ca: ca, etcd: etcd, gate: gate, known: known, cfg: cfg}
}

// Enabled reports whether endpoints can enroll.
func (s *Service) Enabled() bool { return len(s.cfg.EtcdURLs) > 0 }

// CAFingerprint is the fingerprint endpoints pin.
func (s *Service) CAFingerprint() string { return s.ca.Fingerprint() }

// Perms are what an endpoint's etcd user may do: read its own document,
// the generation key and the shared fabric keys, and write its status.
func Perms(endpoint string) []kv.Perm {
	return []kv.Perm{
		{Key: contract.KeyEndpoint(endpoint)},
		{Key: contract.KeyGeneration},
		{Key: contract.KeyPlanes},
		{Key: contract.KeyPorts},
		{Key: contract.KeyStatus(endpoint), Write: true},
	}
}

// Token describes a bootstrap token; its secret is shown once, by MintToken.
type Token struct {
	ID        int64      `json:"id"`
	Endpoint  string     `json:"endpoint"`
	Prefix    string     `json:"prefix"`
	CreatedBy string     `json:"created_by"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	UsedAt    *time.Time `json:"used_at,omitempty"`
}

// checkName refuses names etcd or fabricd reserve, and unknown endpoints.
func (s *Service) checkName(ctx context.Context, name string) error {
	if name == kv.RootUser || name == "" {
		return fmt.Errorf("%w: %q", ErrReservedName, name)
	}
	ok, err := s.known(ctx, name)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownEndpoint, name)
	}
	return nil
}

// MintToken creates a bootstrap token for endpoint, valid for ttl (0:
// DefaultTokenTTL), and returns its secret, which is not stored.
func (s *Service) MintToken(ctx context.Context, endpoint string, ttl time.Duration, createdBy string) (string, Token, error) {
	if !s.Enabled() {
		return "", Token{}, ErrDisabled
	}
	if ttl == 0 {
		ttl = DefaultTokenTTL
	}
	if ttl < time.Second || ttl > MaxTokenTTL {
		return "", Token{}, fmt.Errorf("%w: %v (1 s to %v)", ErrInvalidTTL, ttl, MaxTokenTTL)
	}
	if err := s.checkName(ctx, endpoint); err != nil {
		return "", Token{}, err
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", Token{}, fmt.Errorf("enrollment: %w", err)
	}
	secret := tokenPrefix + base64.RawURLEncoding.EncodeToString(buf)
	t := Token{Endpoint: endpoint, Prefix: secret[:len(tokenPrefix)+6], CreatedBy: createdBy}
	err := s.pool.QueryRow(ctx, `INSERT INTO enrollment_tokens (endpoint, hash, prefix, created_by, expires_at)
		VALUES ($1, $2, $3, $4, now() + $5::interval) RETURNING id, created_at, expires_at`,
		endpoint, hash(secret), t.Prefix, createdBy, fmt.Sprintf("%d milliseconds", ttl.Milliseconds())).
		Scan(&t.ID, &t.CreatedAt, &t.ExpiresAt)
	if err != nil {
		return "", Token{}, fmt.Errorf("enrollment: mint token: %w", err)
	}
	return secret, t, nil
}

// Tokens lists the bootstrap tokens, newest first, at most limit.
func (s *Service) Tokens(ctx context.Context, limit int) ([]Token, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, endpoint, prefix, created_by, created_at, expires_at, used_at
		FROM enrollment_tokens ORDER BY id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("enrollment: list tokens: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Token, error) {
		var t Token
		err := r.Scan(&t.ID, &t.Endpoint, &t.Prefix, &t.CreatedBy, &t.CreatedAt, &t.ExpiresAt, &t.UsedAt)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("enrollment: list tokens: %w", err)
	}
	return out, nil
}

func hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// WellFormedToken reports whether secret looks like a bootstrap token,
// before any look-up.
func WellFormedToken(secret string) bool {
	return strings.HasPrefix(secret, tokenPrefix) && len(secret) <= maxTokenBytes
}

// Enroll trades a bootstrap token and a certificate request for name's
// credentials. The token is spent only when the credentials are issued:
// a bad request or a failed etcd write leaves it usable.
func (s *Service) Enroll(ctx context.Context, secret, name, csrPEM string) (contract.Credentials, error) {
	if !s.Enabled() {
		return contract.Credentials{}, ErrDisabled
	}
	if !WellFormedToken(secret) {
		return contract.Credentials{}, ErrInvalidToken
	}
	if len(csrPEM) > maxCSRBytes {
		return contract.Credentials{}, fmt.Errorf("%w: over %d bytes", pki.ErrBadCSR, maxCSRBytes)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return contract.Credentials{}, fmt.Errorf("enrollment: %w", err)
	}
	defer tx.Rollback(ctx)
	var id int64
	err = tx.QueryRow(ctx, `UPDATE enrollment_tokens SET used_at = now()
		WHERE hash = $1 AND endpoint = $2 AND used_at IS NULL AND expires_at > now() RETURNING id`,
		hash(secret), name).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return contract.Credentials{}, ErrInvalidToken
	}
	if err != nil {
		return contract.Credentials{}, fmt.Errorf("enrollment: %w", err)
	}
	if err := s.checkName(ctx, name); err != nil {
		return contract.Credentials{}, err
	}
	creds, err := s.issue(ctx, tx, name, csrPEM, "enroll")
	if err != nil {
		return contract.Credentials{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return contract.Credentials{}, fmt.Errorf("enrollment: %w", err)
	}
	return creds, nil
}

// Renew issues new credentials to the holder of a current certificate
// (verified by the caller's TLS against the CA).
func (s *Service) Renew(ctx context.Context, cert *x509.Certificate, csrPEM string) (contract.Credentials, error) {
	if !s.Enabled() {
		return contract.Credentials{}, ErrDisabled
	}
	if len(csrPEM) > maxCSRBytes {
		return contract.Credentials{}, fmt.Errorf("%w: over %d bytes", pki.ErrBadCSR, maxCSRBytes)
	}
	name := cert.Subject.CommonName
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return contract.Credentials{}, fmt.Errorf("enrollment: %w", err)
	}
	defer tx.Rollback(ctx)
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM endpoint_credentials WHERE serial = $1 AND endpoint = $2
		AND revoked_at IS NULL AND expires_at > now()`, pki.Serial(cert), name).Scan(&n); err != nil {
		return contract.Credentials{}, fmt.Errorf("enrollment: %w", err)
	}
	if n == 0 {
		return contract.Credentials{}, ErrRevoked
	}
	if err := s.checkName(ctx, name); err != nil {
		return contract.Credentials{}, err
	}
	creds, err := s.issue(ctx, tx, name, csrPEM, "renew")
	if err != nil {
		return contract.Credentials{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return contract.Credentials{}, fmt.Errorf("enrollment: %w", err)
	}
	return creds, nil
}

// issue signs the request, records the certificate and confines the
// endpoint's etcd user, within tx.
func (s *Service) issue(ctx context.Context, tx pgx.Tx, name, csrPEM, via string) (contract.Credentials, error) {
	cert, certPEM, err := s.ca.SignCSR([]byte(csrPEM), name, s.cfg.CertTTL)
	if err != nil {
		return contract.Credentials{}, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO endpoint_credentials (serial, endpoint, via, expires_at) VALUES ($1, $2, $3, $4)`,
		pki.Serial(cert), name, via, cert.NotAfter); err != nil {
		return contract.Credentials{}, fmt.Errorf("enrollment: record certificate: %w", err)
	}
	ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := kv.EnsureUser(ectx, s.etcd, name, Perms(name)); err != nil {
		return contract.Credentials{}, fmt.Errorf("%w: %v", kv.ErrUnavailable, err)
	}
	return contract.Credentials{
		Endpoint: name, Certificate: string(certPEM), CA: string(s.ca.CertPEM), CAFingerprint: s.ca.Fingerprint(),
		EtcdEndpoints: s.cfg.EtcdURLs, EtcdUser: name, ExpiresAt: cert.NotAfter,
	}, nil
}

// Revoke ends every certificate of endpoint and removes its etcd user;
// its open etcd streams end at once. It returns how many certificates it
// revoked; an endpoint with none that is not in the topology is
// ErrUnknownEndpoint.
func (s *Service) Revoke(ctx context.Context, endpoint string) (int, error) {
	rows, err := s.pool.Query(ctx, `UPDATE endpoint_credentials SET revoked_at = now()
		WHERE endpoint = $1 AND revoked_at IS NULL RETURNING serial`, endpoint)
	if err != nil {
		return 0, fmt.Errorf("enrollment: revoke: %w", err)
	}
	serials, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("enrollment: revoke: %w", err)
	}
	if s.gate != nil {
		s.gate.Revoke(serials...)
	}
	if endpoint != kv.RootUser && endpoint != "" {
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := kv.RemoveUser(ectx, s.etcd, endpoint); err != nil {
			return len(serials), fmt.Errorf("%w: %v", kv.ErrUnavailable, err)
		}
	}
	if len(serials) == 0 {
		if ok, err := s.known(ctx, endpoint); err != nil {
			return 0, err
		} else if !ok {
			return 0, fmt.Errorf("%w: %q", ErrUnknownEndpoint, endpoint)
		}
	}
	return len(serials), nil
}

// LoadRevoked gives the gate every revoked certificate that has not
// expired (at start: the gate lives in memory).
func (s *Service) LoadRevoked(ctx context.Context) error {
	if s.gate == nil {
		return nil
	}
	rows, err := s.pool.Query(ctx, `SELECT serial FROM endpoint_credentials WHERE revoked_at IS NOT NULL AND expires_at > now()`)
	if err != nil {
		return fmt.Errorf("enrollment: load revocations: %w", err)
	}
	serials, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("enrollment: load revocations: %w", err)
	}
	s.gate.Revoke(serials...)
	return nil
}

// Sync revokes the credentials of enrolled endpoints that are not in
// the topology (removed or renamed) and removes their etcd users.
func (s *Service) Sync(ctx context.Context, inTopology func(string) bool) error {
	if !s.Enabled() {
		return nil
	}
	users, err := kv.ConfinedUsers(ctx, s.etcd)
	if err != nil {
		return err
	}
	var errs []error
	for _, u := range users {
		if !inTopology(u) {
			if _, err := s.Revoke(ctx, u); err != nil && !errors.Is(err, ErrUnknownEndpoint) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
