package kv_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/kv"
	"github.com/multiplane/multiplane/pki"
)

// secureEtcd starts an embedded etcd with TLS, client certificates and
// auth, as fabricd runs it beyond loopback, and returns its root store.
func secureEtcd(t *testing.T) (*kv.Store, *pki.CA, *kv.Gate, string) {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.LoadOrCreate(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := pki.WriteFile(p, data); err != nil {
			t.Fatal(err)
		}
		return p
	}
	srvCert, srvKey, _ := ca.IssueServer("etcd", []string{"127.0.0.1"}, time.Hour)
	rootCert, rootKey, _ := ca.IssueClient(kv.RootUser, time.Hour)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	gate := kv.NewGate()
	cfg := kv.Config{
		DataDir: dir, Listen: addr, Gate: gate,
		ServerTLS: &kv.ServerTLS{CertFile: write("etcd.crt", srvCert), KeyFile: write("etcd.key", srvKey), ClientCAFile: filepath.Join(dir, "pki", pki.CACertFile)},
		CAFile:    filepath.Join(dir, "pki", pki.CACertFile), CertFile: write("root.crt", rootCert), KeyFile: write("root.key", rootKey),
	}
	s, err := kv.Open(testenv.Context(t), cfg, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, ca, gate, "https://" + addr
}

// clientAs dials url with a certificate for cn from ca (nil: none).
func clientAs(t *testing.T, url string, ca, issuer *pki.CA, cn string) (*clientv3.Client, string) {
	t.Helper()
	tlsCfg := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	serial := ""
	if issuer != nil {
		key, _ := pki.NewKey()
		csr, _ := pki.NewCSR(key, cn)
		cert, certPEM, err := issuer.SignCSR(csr, cn, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		keyPEM, _ := pki.EncodeKey(key)
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		tlsCfg.Certificates = []tls.Certificate{pair}
		serial = cert.SerialNumber.Text(16)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, TLS: tlsCfg, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, serial
}

func short(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSecureEmbeddedConfinesUsers(t *testing.T) {
	root, ca, gate, url := secureEtcd(t)
	ctx := testenv.Context(t)
	own, shared, status, other := kv.Prefix+"endpoints/host-a", kv.Prefix+"fabric/generation", kv.Prefix+"status/host-a", kv.Prefix+"endpoints/host-b"
	for _, k := range []string{own, shared, other} {
		if _, err := root.Client.Put(ctx, k, "v"); err != nil {
			t.Fatalf("root put %s: %v", k, err)
		}
	}
	perms := []kv.Perm{{Key: own}, {Key: shared}, {Key: status, Write: true}}
	if err := kv.EnsureUser(ctx, root.Client, "host-a", perms); err != nil {
		t.Fatal(err)
	}
	if err := kv.EnsureUser(ctx, root.Client, "host-a", perms); err != nil { // idempotent
		t.Fatal(err)
	}
	if err := kv.EnsureUser(ctx, root.Client, kv.RootUser, perms); !errors.Is(err, kv.ErrReservedUser) {
		t.Fatalf("EnsureUser(root) = %v", err)
	}
	cli, serial := clientAs(t, url, ca, ca, "host-a")
	for _, k := range []string{own, shared} {
		if _, err := cli.Get(short(t), k); err != nil {
			t.Errorf("read %s: %v", k, err)
		}
	}
	if _, err := cli.Put(short(t), status, "ok"); err != nil {
		t.Errorf("write own status: %v", err)
	}
	denied := map[string]func() error{
		"read another's document": func() error { _, err := cli.Get(short(t), other); return err },
		"write another's status":  func() error { _, err := cli.Put(short(t), kv.Prefix+"status/host-b", "x"); return err },
		"write the generation":    func() error { _, err := cli.Put(short(t), shared, "x"); return err },
		"write its own document":  func() error { _, err := cli.Put(short(t), own, "x"); return err },
		"list the prefix":         func() error { _, err := cli.Get(short(t), "/multiplane/", clientv3.WithPrefix()); return err },
		"add a user":              func() error { _, err := cli.UserAdd(short(t), "evil", "pw"); return err },
	}
	for name, f := range denied {
		if err := f(); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("%s: %v, want permission denied", name, err)
		}
	}

	// No certificate, or one from another CA: the handshake fails.
	stranger, _ := pki.LoadOrCreate(t.TempDir())
	anon, _ := clientAs(t, url, ca, nil, "")
	forged, _ := clientAs(t, url, ca, stranger, "host-a")
	for name, c := range map[string]*clientv3.Client{"no certificate": anon, "another CA": forged} {
		if _, err := c.Get(short(t), own); err == nil {
			t.Errorf("%s: read allowed", name)
		}
	}

	// Revoking the certificate ends its open watch and refuses it.
	wch := cli.Watch(clientv3.WithRequireLeader(ctx), own)
	if _, err := root.Client.Put(ctx, own, "v2"); err != nil {
		t.Fatal(err)
	}
	if r := <-wch; r.Err() != nil || len(r.Events) != 1 {
		t.Fatalf("watch before revocation: %+v %v", r, r.Err())
	}
	start := time.Now()
	gate.Revoke(serial)
	select {
	case r, ok := <-wch:
		for ok && r.Err() == nil && !r.Canceled {
			r, ok = <-wch
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch still open 5s after revocation")
	}
	t.Logf("watch ended %v after revocation", time.Since(start))
	if _, err := cli.Get(short(t), own); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("read after revocation: %v", err)
	}

	// Removing the user refuses a fresh certificate with its name.
	if err := kv.RemoveUser(ctx, root.Client, "host-a"); err != nil {
		t.Fatal(err)
	}
	again, _ := clientAs(t, url, ca, ca, "host-a")
	if _, err := again.Get(short(t), own); err == nil {
		t.Fatal("read allowed for a removed user")
	}
	if users, err := kv.ConfinedUsers(ctx, root.Client); err != nil || len(users) != 0 {
		t.Fatalf("confined users after removal: %v %v", users, err)
	}
}
