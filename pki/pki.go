// Package pki is Multiplane's certificate authority: fabricd creates one
// under its data directory on first start (or loads the operator's), and
// issues from it the certificates of its REST API, of the embedded etcd,
// of its own etcd root identity and, from their CSRs, of every enrolled
// endpoint (Common Name = the endpoint, which etcd takes as its user).
// Keys are ECDSA P-256; private keys are written 0600.
//
//	ca, err := pki.LoadOrCreate("var/pki")
//	cert, key, err := ca.IssueServer("fabricd", []string{"10.0.0.1", "fabricd.example"}, 365*24*time.Hour)
//	certPEM, err := ca.SignCSR(csrPEM, "host-a", 30*24*time.Hour)
//
// The endpoint side only needs NewKey, NewCSR and Fingerprint.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/multiplane/multiplane/internal/fsutil"
)

// Errors.
var (
	ErrBadCSR = errors.New("pki: invalid certificate request")
	ErrBadPEM = errors.New("pki: no PEM data of the expected type")
)

// File names under the CA directory.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// caLifetime is how long a created CA is valid.
const caLifetime = 10 * 365 * 24 * time.Hour

// CA signs certificates.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     crypto.Signer
}

// LoadOrCreate loads dir/ca.crt and dir/ca.key, or creates them (and dir,
// 0700) when neither exists. One without the other is an error: a CA is
// never silently replaced.
func LoadOrCreate(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		return Load(certPath, keyPath)
	case !errors.Is(certErr, os.ErrNotExist) || !errors.Is(keyErr, os.ErrNotExist):
		return nil, fmt.Errorf("pki: %s and %s must both exist or both be absent", certPath, keyPath)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	key, err := NewKey()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "Multiplane CA", Organization: []string{"Multiplane"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: create CA: %w", err)
	}
	keyPEM, err := EncodeKey(key)
	if err != nil {
		return nil, err
	}
	// The key first: a crash between the two leaves a key without a
	// certificate, which the next start reports instead of replacing.
	if err := WriteFile(keyPath, keyPEM); err != nil {
		return nil, err
	}
	if err := WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})); err != nil {
		return nil, err
	}
	return Load(certPath, keyPath)
}

// Load reads a CA certificate and its key (PEM).
func Load(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	cert, err := ParseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate %s: %w", certFile, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("pki: %s is not a CA certificate", certFile)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key %s: %w", keyFile, err)
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, fmt.Errorf("pki: %s is not the key of %s", keyFile, certFile)
	}
	return &CA{Cert: cert, CertPEM: certPEM, key: key}, nil
}

// Fingerprint is the CA certificate's "sha256:<hex>", which an endpoint
// pins when it enrolls (endpoint enroll --ca-fingerprint).
func (ca *CA) Fingerprint() string { return Fingerprint(ca.Cert.Raw) }

// Pool is a certificate pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// IssueServer issues a certificate and key for a server reachable at
// hosts (IP addresses or DNS names), usable for server and client
// authentication (etcd dials itself with its server certificate).
func (ca *CA) IssueServer(cn string, hosts []string, ttl time.Duration) (certPEM, keyPEM []byte, err error) {
	tmpl := ca.template(cn, ttl)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issueWithKey(tmpl)
}

// IssueClient issues a client certificate and key for cn.
func (ca *CA) IssueClient(cn string, ttl time.Duration) (certPEM, keyPEM []byte, err error) {
	tmpl := ca.template(cn, ttl)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.issueWithKey(tmpl)
}

// SignCSR checks a PEM certificate request (its signature, and that its
// Common Name is cn) and issues a client certificate for its key.
func (ca *CA) SignCSR(csrPEM []byte, cn string, ttl time.Duration) (*x509.Certificate, []byte, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, nil, fmt.Errorf("%w: not a PEM CERTIFICATE REQUEST", ErrBadCSR)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrBadCSR, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, nil, fmt.Errorf("%w: signature: %v", ErrBadCSR, err)
	}
	if csr.Subject.CommonName != cn {
		return nil, nil, fmt.Errorf("%w: common name %q, want %q", ErrBadCSR, csr.Subject.CommonName, cn)
	}
	switch k := csr.PublicKey.(type) {
	case *ecdsa.PublicKey:
		if k.Curve.Params().BitSize < 256 {
			return nil, nil, fmt.Errorf("%w: ECDSA key under 256 bits", ErrBadCSR)
		}
	default:
		return nil, nil, fmt.Errorf("%w: key type %T (want ECDSA P-256 or larger)", ErrBadCSR, csr.PublicKey)
	}
	tmpl := ca.template(cn, ttl)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, csr.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: sign: %w", err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

func (ca *CA) template(cn string, ttl time.Duration) *x509.Certificate {
	now := time.Now()
	notAfter := now.Add(ttl)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	return &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-5 * time.Minute), NotAfter: notAfter, // clocks of hosts differ a little
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
}

func (ca *CA) issueWithKey(tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := NewKey()
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: issue %s: %w", tmpl.Subject.CommonName, err)
	}
	if keyPEM, err = EncodeKey(key); err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// NewKey returns a new ECDSA P-256 key.
func NewKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: key: %w", err)
	}
	return k, nil
}

// NewCSR returns a PEM certificate request for key with Common Name cn.
func NewCSR(key crypto.Signer, cn string) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn}}, key)
	if err != nil {
		return nil, fmt.Errorf("pki: certificate request: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// EncodeKey encodes a private key as PEM (PKCS #8).
func EncodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseKey decodes a PEM private key (PKCS #8 or SEC 1).
func ParseKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, ErrBadPEM
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
		return nil, fmt.Errorf("pki: key type %T cannot sign", k)
	}
	if k, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	return nil, errors.New("pki: not a PKCS #8 or EC private key")
}

// ParseCert decodes the first PEM certificate in data.
func ParseCert(data []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, ErrBadPEM
		}
		if block.Type == "CERTIFICATE" {
			return x509.ParseCertificate(block.Bytes)
		}
	}
}

// Serial is a certificate's serial number in lower-case hex, as fabricd
// records and revokes it.
func Serial(c *x509.Certificate) string { return c.SerialNumber.Text(16) }

// Fingerprint is "sha256:" and the hex SHA-256 of a DER certificate.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ValidFingerprint reports whether s has Fingerprint's form.
func ValidFingerprint(s string) bool {
	h, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(h) != 64 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

// WriteFile writes data to path atomically with mode 0600.
func WriteFile(path string, data []byte) error {
	if err := fsutil.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic("pki: no randomness: " + err.Error())
	}
	return n.Add(n, big.NewInt(1)) // never 0
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}
