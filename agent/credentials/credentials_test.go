package credentials

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/pki"
)

// stored enrolls nothing over the network: it saves what fabricd would
// have returned for a certificate of ttl, received at received.
func stored(t *testing.T, ttl time.Duration) (string, *pki.CA) {
	t.Helper()
	ca, err := pki.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	storeIn(t, dir, ca, "host-a", ttl)
	return dir, ca
}

// storeIn saves credentials of endpoint, issued by ca, in dir.
func storeIn(t *testing.T, dir string, ca *pki.CA, endpoint string, ttl time.Duration) {
	t.Helper()
	key, _ := pki.NewKey()
	csr, _ := pki.NewCSR(key, endpoint)
	_, certPEM, err := ca.SignCSR(csr, endpoint, ttl)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := pki.EncodeKey(key)
	creds := contract.Credentials{Endpoint: endpoint, Certificate: string(certPEM), CA: string(ca.CertPEM),
		CAFingerprint: ca.Fingerprint(), EtcdEndpoints: []string{"https://10.0.0.1:2379"}, EtcdUser: endpoint}
	if err := save(dir, "https://10.0.0.1:8443", creds, keyPEM); err != nil {
		t.Fatal(err)
	}
}

// A host enrolled again while its agent runs: Reload takes the new
// certificate for new connections; nothing new, or another endpoint's
// credentials, changes nothing.
func TestReloadTakesNewCredentials(t *testing.T) {
	dir, ca := stored(t, time.Hour)
	id, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := id.TLSConfig() // a client made before the reload
	serial := func() string {
		c, _ := cfg.GetClientCertificate(&tls.CertificateRequestInfo{})
		leaf, _ := x509.ParseCertificate(c.Certificate[0])
		return leaf.SerialNumber.String()
	}
	before := serial()
	if changed, err := id.Reload(); changed || err != nil {
		t.Fatalf("Reload with nothing new = %v, %v", changed, err)
	}
	replaced := id.Replaced()
	storeIn(t, dir, ca, "host-a", 2*time.Hour)
	if changed, err := id.Reload(); !changed || err != nil {
		t.Fatalf("Reload after enrolling again = %v, %v", changed, err)
	}
	select {
	case <-replaced:
	default:
		t.Fatal("Replaced's channel did not close")
	}
	if serial() == before {
		t.Fatal("the client still presents the old certificate")
	}
	if d := time.Until(id.Expiry()); d < 110*time.Minute {
		t.Fatalf("expiry in %v, want the new certificate's 2 h", d)
	}
	now := serial()
	storeIn(t, dir, ca, "host-b", time.Hour)
	if changed, err := id.Reload(); changed || err == nil || id.Endpoint() != "host-a" || serial() != now {
		t.Fatalf("Reload of host-b's credentials = %v, %v; endpoint %s", changed, err, id.Endpoint())
	}
	other, err := pki.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	storeIn(t, dir, other, "host-a", time.Hour)
	if changed, err := id.Reload(); changed || err == nil || serial() != now {
		t.Fatalf("Reload of credentials from another CA = %v, %v", changed, err)
	}
}

func TestLoadAndRenewAtTwoThirdsFromArrival(t *testing.T) {
	if _, err := Load(t.TempDir()); !errors.Is(err, ErrNotEnrolled) {
		t.Fatalf("Load(empty) = %v, want ErrNotEnrolled", err)
	}
	dir, _ := stored(t, 45*time.Second)
	id, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if id.Endpoint() != "host-a" || len(id.EtcdEndpoints()) != 1 {
		t.Fatalf("loaded %q %v", id.Endpoint(), id.EtcdEndpoints())
	}
	// The certificate is backdated 5 minutes for clock skew; renewal must
	// still wait about 30 s, not renew at once.
	if d := time.Until(id.RenewAt()); d < 25*time.Second || d > 31*time.Second {
		t.Fatalf("renews in %v, want about 30 s", d)
	}
	cert, err := id.TLSConfig().GetClientCertificate(&tls.CertificateRequestInfo{})
	if err != nil || cert == nil || len(cert.Certificate) == 0 {
		t.Fatalf("client certificate %v %v", cert, err)
	}
}

func TestPinnedFingerprint(t *testing.T) {
	_, ca := stored(t, time.Hour)
	certPEM, _, _ := ca.IssueServer("fabricd", []string{"10.0.0.1"}, time.Hour)
	leaf, _ := pki.ParseCert(certPEM)
	cs := tls.ConnectionState{ServerName: "10.0.0.1", PeerCertificates: []*x509.Certificate{leaf, ca.Cert}}
	if err := verifyPinned(cs, ca.Fingerprint()); err != nil {
		t.Fatalf("the right CA: %v", err)
	}
	other, _ := pki.LoadOrCreate(t.TempDir())
	if err := verifyPinned(cs, other.Fingerprint()); err == nil {
		t.Fatal("another CA's fingerprint accepted")
	}
	// A chain that carries the pinned CA but a leaf it did not sign.
	forged, _, _ := other.IssueServer("fabricd", []string{"10.0.0.1"}, time.Hour)
	fl, _ := pki.ParseCert(forged)
	cs.PeerCertificates = []*x509.Certificate{fl, ca.Cert}
	if err := verifyPinned(cs, ca.Fingerprint()); err == nil {
		t.Fatal("a leaf of another CA accepted beside the pinned CA")
	}
	cs.ServerName = "10.9.9.9"
	cs.PeerCertificates = []*x509.Certificate{leaf, ca.Cert}
	if err := verifyPinned(cs, ca.Fingerprint()); err == nil {
		t.Fatal("a certificate for another host accepted")
	}
}
