package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestCreateThenLoadTheSameCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	ca, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{CAKeyFile, CACertFile} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v: want 0600", f, err, fi.Mode())
		}
	}
	again, err := LoadOrCreate(dir)
	if err != nil || again.Fingerprint() != ca.Fingerprint() {
		t.Fatalf("reload: %v, fingerprint %s want %s", err, again.Fingerprint(), ca.Fingerprint())
	}
	if !ValidFingerprint(ca.Fingerprint()) || ValidFingerprint("sha256:zz") || ValidFingerprint(ca.Fingerprint()[7:]) {
		t.Fatal("ValidFingerprint is wrong")
	}
	os.Remove(filepath.Join(dir, CACertFile))
	if _, err := LoadOrCreate(dir); err == nil {
		t.Fatal("a key without its certificate was replaced by a new CA")
	}
}

func TestLoadRefusesAKeyOfAnotherCA(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	if _, err := LoadOrCreate(a); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(b); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(filepath.Join(a, CACertFile), filepath.Join(b, CAKeyFile)); err == nil {
		t.Fatal("loaded a CA certificate with another CA's key")
	}
}

func TestSignCSR(t *testing.T) {
	ca, err := LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := NewKey()
	csr, err := NewCSR(key, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	cert, certPEM, err := ca.SignCSR(csr, "host-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := ParseCert(certPEM)
	if err != nil || parsed.SerialNumber.Cmp(cert.SerialNumber) != 0 || parsed.Subject.CommonName != "host-a" {
		t.Fatalf("issued %v %v", parsed, err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("client certificate does not verify: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool()}); err == nil {
		t.Fatal("an endpoint's certificate verifies as a server certificate")
	}
	if d := time.Until(cert.NotAfter); d > time.Hour || d < 59*time.Minute {
		t.Fatalf("expires in %v, want 1h", d)
	}

	rsaKey, _ := rsa.GenerateKey(rand.Reader, 1024)
	rsaCSR, _ := NewCSR(rsaKey, "host-a")
	small, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	smallCSR, _ := NewCSR(small, "host-a")
	tampered := func() []byte {
		block, _ := pem.Decode(csr)
		der := append([]byte(nil), block.Bytes...)
		der[len(der)-5] ^= 0xff
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}()
	other, _ := NewCSR(key, "host-b")
	for name, bad := range map[string][]byte{
		"other name": other, "rsa": rsaCSR, "p224": smallCSR, "tampered": tampered,
		"garbage": []byte("hello"), "a certificate": certPEM,
	} {
		if _, _, err := ca.SignCSR(bad, "host-a", time.Hour); !errors.Is(err, ErrBadCSR) {
			t.Errorf("%s: %v, want ErrBadCSR", name, err)
		}
	}
}

func TestIssueServerNamesItsHosts(t *testing.T) {
	ca, err := LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.IssueServer("etcd", []string{"10.1.2.3", "fabricd.example"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := ParseCert(certPEM)
	for _, host := range []string{"10.1.2.3", "fabricd.example"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: host}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "10.9.9.9"}); err == nil {
		t.Error("verifies for a host it does not name")
	}
	if _, err := ParseKey(keyPEM); err != nil {
		t.Fatal(err)
	}
	// The CA never issues past its own expiry.
	c := ca.template("x", 100*365*24*time.Hour)
	if c.NotAfter.After(ca.Cert.NotAfter) {
		t.Fatal("certificate outlives its CA")
	}
}
