package telemetry

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/multiplane/multiplane/fabricsim/gnmisim"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/planes"
)

// testPKI is a CA with a server and a client certificate, written as PEM files.
type testPKI struct {
	dir                       string
	caFile, certFile, keyFile string // the client's
	serverTLS                 *tls.Config
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage) (tls.Certificate, []byte, []byte) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, DNSNames: []string{cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{usage},
			KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return pair, certPEM, keyPEM
	}
	serverPair, _, _ := issue(2, "sw1.fabric.test", x509.ExtKeyUsageServerAuth)
	_, clientCert, clientKey := issue(3, "fabricd", x509.ExtKeyUsageClientAuth)
	p := &testPKI{dir: dir, caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "client.pem"), keyFile: filepath.Join(dir, "client.key")}
	for f, b := range map[string][]byte{
		p.caFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), p.certFile: clientCert, p.keyFile: clientKey,
	} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	p.serverTLS = &tls.Config{Certificates: []tls.Certificate{serverPair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	return p
}

func TestMTLSAndPassword(t *testing.T) {
	const secret = "s3cr3t-do-not-log"
	pki := newTestPKI(t)
	sw, err := gnmisim.Start(gnmisim.Config{Name: "sw1", Source: gnmisim.Synthetic(2, 1e6), Tick: tick,
		TLS: pki.serverTLS, Username: "fabricd", Password: secret, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	t.Setenv("FABRICD_GNMI_TEST_PASSWORD", secret)
	t.Setenv("FABRICD_GNMI_TEST_WRONG", "nope")
	t.Setenv("MULTIPLANE_TEST_SECRET", "nope") // set, but not a gNMI password variable

	target := func(pwEnv string, withClientCert bool) *planes.Topology {
		tlsCfg := &planes.TLSConfig{CA: pki.caFile, ServerName: "sw1.fabric.test"}
		if withClientCert {
			tlsCfg.Cert, tlsCfg.Key = pki.certFile, pki.keyFile
		}
		topo := topologyFor(map[string]string{"sw1": sw.Addr()}, 2)
		topo.Switches[0].GNMI = planes.GNMITarget{Address: sw.Addr(), TLS: tlsCfg, Username: "fabricd", PasswordEnv: pwEnv}
		return topo
	}

	t.Run("good", func(t *testing.T) {
		logs := &testutil.SyncBuffer{}
		h := startCollector(t, fastConfig(), target("FABRICD_GNMI_TEST_PASSWORD", true), slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
		h.waitReach(t, 0, "synced over mTLS", synced)
		h.waitRates(t, 0, 2)
		if strings.Contains(logs.String(), secret) {
			t.Fatal("the password was logged")
		}
	})
	for _, tc := range []struct {
		name, pwEnv string
		clientCert  bool
		reason      string // in the status every viewer sees
		logged      string // in fabricd's log only ("": nothing hidden)
	}{
		{"wrong password", "FABRICD_GNMI_TEST_WRONG", true, "Unauthenticated", ""},
		{"unset password variable", "FABRICD_GNMI_TEST_UNSET", true, "could not load its credentials", "FABRICD_GNMI_TEST_UNSET is not set"},
		{"no client certificate", "FABRICD_GNMI_TEST_PASSWORD", false, "connect:", ""},
		{"variable outside the prefix", "MULTIPLANE_TEST_SECRET", true, "could not load its credentials", "MULTIPLANE_TEST_SECRET\\\" does not start with FABRICD_GNMI_"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &testutil.SyncBuffer{}
			h := startCollector(t, fastConfig(), target(tc.pwEnv, tc.clientCert), slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
			r := h.waitReach(t, 0, "unreachable", unreached)
			if !strings.Contains(r.Reason, tc.reason) {
				t.Fatalf("reason %q, want %q", r.Reason, tc.reason)
			}
			if strings.Contains(r.Reason, tc.pwEnv) {
				t.Fatalf("reason %q names the password variable", r.Reason)
			}
			if tc.logged != "" && !strings.Contains(logs.String(), tc.logged) {
				t.Fatalf("the log lacks %q:\n%s", tc.logged, logs.String())
			}
			if strings.Contains(logs.String(), secret) || strings.Contains(logs.String(), "nope") {
				t.Fatal("a password was logged")
			}
		})
	}
}
