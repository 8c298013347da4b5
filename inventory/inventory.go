// Package inventory keeps the fabric's declared topology in PostgreSQL: the
// normalized tables (planes, switches, interfaces, endpoints, ports) that
// intents and history refer to, and every accepted topology document as a
// numbered revision.
//
// Replace swaps the whole topology in one transaction: all or nothing.
// Current returns the latest accepted topology, cached in memory and
// reloaded when another writer (another fabricd replica) moved the revision.
//
//	inv := inventory.New(pool)
//	rev, changed, err := inv.Replace(ctx, topo, "admin")
//	snap, err := inv.Current(ctx)
package inventory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/multiplane/multiplane/planes"
)

// Snapshot is one accepted topology revision.
type Snapshot struct {
	Revision  int64
	AppliedAt time.Time
	AppliedBy string
	SHA256    string
	Topology  *planes.Topology
	Links     []planes.Link
}

// Inventory reads and replaces the declared topology.
type Inventory struct {
	pool *pgxpool.Pool

	mu     sync.Mutex
	cached *Snapshot
}

// New returns an Inventory over a migrated database.
func New(pool *pgxpool.Pool) *Inventory { return &Inventory{pool: pool} }

// empty is the snapshot before any topology was loaded.
var empty = &Snapshot{Topology: &planes.Topology{}}

// Current returns the latest accepted topology (revision 0 and an empty
// topology before the first one).
func (inv *Inventory) Current(ctx context.Context) (*Snapshot, error) {
	var rev int64
	if err := inv.pool.QueryRow(ctx, `SELECT coalesce(max(revision), 0) FROM topology_revisions`).Scan(&rev); err != nil {
		return nil, fmt.Errorf("inventory: current revision: %w", err)
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if rev == 0 {
		return empty, nil
	}
	if inv.cached != nil && inv.cached.Revision == rev {
		return inv.cached, nil
	}
	snap := &Snapshot{}
	var doc []byte
	err := inv.pool.QueryRow(ctx, `SELECT revision, applied_at, applied_by, sha256, document
		FROM topology_revisions WHERE revision = $1`, rev).Scan(&snap.Revision, &snap.AppliedAt, &snap.AppliedBy, &snap.SHA256, &doc)
	if err != nil {
		return nil, fmt.Errorf("inventory: load revision %d: %w", rev, err)
	}
	snap.Topology = &planes.Topology{}
	if err := json.Unmarshal(doc, snap.Topology); err != nil {
		return nil, fmt.Errorf("inventory: decode revision %d: %w", rev, err)
	}
	snap.Links = snap.Topology.Links()
	inv.cached = snap
	return snap, nil
}

// Replace makes topo the current topology in one transaction. An identical
// document leaves the revision as it is (changed is false). Intents that
// refer to endpoints by name (rate class assignments) survive when the
// endpoint is kept.
func (inv *Inventory) Replace(ctx context.Context, topo *planes.Topology, actor string) (revision int64, changed bool, err error) {
	doc, err := json.Marshal(topo)
	if err != nil {
		return 0, false, fmt.Errorf("inventory: encode topology: %w", err)
	}
	sum := sha256.Sum256(doc)
	digest := hex.EncodeToString(sum[:])

	err = pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
		// Serialize writers: one topology change at a time.
		if _, err := tx.Exec(ctx, `SELECT generation FROM fabric_state WHERE id = 1 FOR UPDATE`); err != nil {
			return err
		}
		var lastRev int64
		var lastSum string
		err := tx.QueryRow(ctx, `SELECT revision, sha256 FROM topology_revisions ORDER BY revision DESC LIMIT 1`).Scan(&lastRev, &lastSum)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if lastSum == digest {
			revision = lastRev
			return nil
		}
		if err := writeTables(ctx, tx, topo); err != nil {
			return err
		}
		changed = true
		return tx.QueryRow(ctx, `INSERT INTO topology_revisions (applied_by, sha256, document)
			VALUES ($1, $2, $3) RETURNING revision`, actor, digest, doc).Scan(&revision)
	})
	if err != nil {
		return 0, false, fmt.Errorf("inventory: replace topology: %w", err)
	}
	return revision, changed, nil
}

func writeTables(ctx context.Context, tx pgx.Tx, t *planes.Topology) error {
	var planeNames, switchNames, endpointNames []string
	for _, p := range t.Planes {
		planeNames = append(planeNames, p.Name)
	}
	for _, s := range t.Switches {
		switchNames = append(switchNames, s.Name)
	}
	for _, e := range t.Endpoints {
		endpointNames = append(endpointNames, e.Name)
	}
	stmts := []struct {
		sql  string
		args []any
	}{
		{`DELETE FROM endpoint_ports`, nil},
		{`DELETE FROM switch_interfaces`, nil},
		{`DELETE FROM endpoints WHERE name <> ALL($1)`, []any{endpointNames}},
		{`DELETE FROM switches WHERE name <> ALL($1)`, []any{switchNames}},
		{`DELETE FROM planes WHERE name <> ALL($1)`, []any{planeNames}},
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s.sql, s.args...); err != nil {
			return fmt.Errorf("%s: %w", s.sql, err)
		}
	}
	batch := &pgx.Batch{}
	for _, p := range t.Planes {
		batch.Queue(`INSERT INTO planes (name, description) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE SET description = excluded.description`, p.Name, p.Description)
	}
	for _, s := range t.Switches {
		g := s.GNMI
		var ca, cert, key, sn *string
		if g.TLS != nil {
			ca, cert, key, sn = nullable(g.TLS.CA), nullable(g.TLS.Cert), nullable(g.TLS.Key), nullable(g.TLS.ServerName)
		}
		batch.Queue(`INSERT INTO switches (name, plane, gnmi_address, gnmi_insecure, gnmi_tls_ca, gnmi_tls_cert,
				gnmi_tls_key, gnmi_tls_server_name, gnmi_username, gnmi_password_env, gnmi_allow_plaintext_password)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
			ON CONFLICT (name) DO UPDATE SET plane = excluded.plane, gnmi_address = excluded.gnmi_address,
				gnmi_insecure = excluded.gnmi_insecure, gnmi_tls_ca = excluded.gnmi_tls_ca,
				gnmi_tls_cert = excluded.gnmi_tls_cert, gnmi_tls_key = excluded.gnmi_tls_key,
				gnmi_tls_server_name = excluded.gnmi_tls_server_name, gnmi_username = excluded.gnmi_username,
				gnmi_password_env = excluded.gnmi_password_env,
				gnmi_allow_plaintext_password = excluded.gnmi_allow_plaintext_password`,
			s.Name, s.Plane, g.Address, g.Insecure, ca, cert, key, sn, nullable(g.Username), nullable(g.PasswordEnv),
			g.AllowPlaintextPassword)
	}
	for _, e := range t.Endpoints {
		batch.Queue(`INSERT INTO endpoints (name, description) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE SET description = excluded.description`, e.Name, e.Description)
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return err
	}
	var ifaces, ports [][]any
	for _, e := range t.Endpoints {
		for _, p := range e.Ports {
			ifaces = append(ifaces, []any{p.Switch, p.Interface, p.SpeedBps})
			ports = append(ports, []any{e.Name, p.Plane, p.Address, p.Switch, p.Interface})
		}
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"switch_interfaces"}, []string{"switch", "name", "speed_bps"}, pgx.CopyFromRows(ifaces)); err != nil {
		return fmt.Errorf("switch interfaces: %w", err)
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"endpoint_ports"}, []string{"endpoint", "plane", "address", "switch", "interface"}, pgx.CopyFromRows(ports)); err != nil {
		return fmt.Errorf("endpoint ports: %w", err)
	}
	return nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
