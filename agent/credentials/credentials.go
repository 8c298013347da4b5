// Package credentials is the endpoint's side of enrollment: it makes a
// key on the host, trades a bootstrap token and a certificate request for
// fabricd's credentials (Enroll), keeps them in the state directory
// (0700, files 0600), loads them for `endpoint run` (Load) and renews the
// certificate before it expires (Identity.Renew, Identity.RenewLoop).
//
//	creds, err := credentials.Enroll(ctx, credentials.EnrollOptions{Server: "https://10.0.0.1:8443",
//		Token: tok, Name: "host-a", StateDir: "/var/lib/multiplane/endpoint", CAFingerprint: "sha256:..."})
//	id, err := credentials.Load("/var/lib/multiplane/endpoint")
//	cli, _ := clientv3.New(clientv3.Config{Endpoints: id.EtcdEndpoints(), TLS: id.TLSConfig()})
package credentials

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/internal/fsutil"
	"github.com/multiplane/multiplane/pki"
)

// Files under the state directory.
const (
	FileInfo = "enrollment.json" // what fabricd returned, without the PEM blocks
	FileCert = "endpoint.pem"    // the private key and the certificate: one write replaces both
	FileCA   = "ca.crt"
)

// ErrNotEnrolled is returned by Load for a state directory without
// credentials.
var ErrNotEnrolled = errors.New("credentials: not enrolled (run endpoint enroll)")

// info is FileInfo's content.
type info struct {
	Server        string    `json:"server"`
	Endpoint      string    `json:"endpoint"`
	EtcdEndpoints []string  `json:"etcd_endpoints"`
	EtcdUser      string    `json:"etcd_user"`
	CAFingerprint string    `json:"ca_fingerprint"`
	ExpiresAt     time.Time `json:"expires_at"`
	// ReceivedAt is this host's clock when the certificate arrived: the
	// certificate's NotBefore is backdated for clock skew, so renewal
	// counts from here.
	ReceivedAt time.Time `json:"received_at"`
}

// EnrollOptions are `endpoint enroll`'s settings.
type EnrollOptions struct {
	Server        string // https://host:port of fabricd's API
	Token         string // the bootstrap token
	Name          string // the endpoint's name in the topology
	StateDir      string
	CAFingerprint string // sha256:<hex> of fabricd's CA, to trust it on first contact
	CAFile        string // or a CA bundle (PEM) to verify fabricd with
	Timeout       time.Duration
}

// Enroll makes a key, enrolls with fabricd and stores the credentials.
func Enroll(ctx context.Context, o EnrollOptions) (contract.Credentials, error) {
	u, err := url.Parse(o.Server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return contract.Credentials{}, fmt.Errorf("credentials: --server %q must be an https:// URL", o.Server)
	}
	if o.Token == "" || o.Name == "" || o.StateDir == "" {
		return contract.Credentials{}, errors.New("credentials: a token, a name and a state directory are required")
	}
	if o.CAFingerprint != "" && !pki.ValidFingerprint(o.CAFingerprint) {
		return contract.Credentials{}, fmt.Errorf("credentials: --ca-fingerprint %q is not sha256:<64 hex digits>", o.CAFingerprint)
	}
	tlsCfg, err := firstContactTLS(o.CAFingerprint, o.CAFile)
	if err != nil {
		return contract.Credentials{}, err
	}
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return contract.Credentials{}, fmt.Errorf("credentials: %w", err)
	}
	key, err := pki.NewKey()
	if err != nil {
		return contract.Credentials{}, err
	}
	creds, err := post(ctx, tlsCfg, o.Timeout, strings.TrimRight(o.Server, "/")+contract.PathEnroll, o.Token, o.Name, key)
	if err != nil {
		return contract.Credentials{}, err
	}
	if o.CAFingerprint != "" && creds.CAFingerprint != o.CAFingerprint {
		return contract.Credentials{}, fmt.Errorf("credentials: fabricd returned CA %s, not the pinned %s", creds.CAFingerprint, o.CAFingerprint)
	}
	keyPEM, err := pki.EncodeKey(key)
	if err != nil {
		return contract.Credentials{}, err
	}
	if err := save(o.StateDir, strings.TrimRight(o.Server, "/"), creds, keyPEM); err != nil {
		return contract.Credentials{}, err
	}
	return creds, nil
}

// firstContactTLS trusts fabricd by the pinned CA fingerprint (the CA
// must be in the chain fabricd presents and sign its certificate), by a
// CA file, or by the system's roots.
func firstContactTLS(fingerprint, caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case caFile != "":
		data, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("credentials: --ca-file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("credentials: --ca-file %s holds no PEM certificate", caFile)
		}
	case fingerprint != "":
		cfg.InsecureSkipVerify = true // replaced by the pin check below
		cfg.VerifyConnection = func(cs tls.ConnectionState) error { return verifyPinned(cs, fingerprint) }
	}
	return cfg, nil
}

func verifyPinned(cs tls.ConnectionState, fingerprint string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("credentials: fabricd presented no certificate")
	}
	for _, c := range cs.PeerCertificates {
		if pki.Fingerprint(c.Raw) != fingerprint || !c.IsCA {
			continue
		}
		roots := x509.NewCertPool()
		roots.AddCert(c)
		inter := x509.NewCertPool()
		for _, i := range cs.PeerCertificates[1:] {
			inter.AddCert(i)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: cs.ServerName})
		if err != nil {
			return fmt.Errorf("credentials: fabricd's certificate is not valid under the pinned CA: %w", err)
		}
		return nil
	}
	return fmt.Errorf("credentials: fabricd's CA is not the pinned %s", fingerprint)
}

// post sends a certificate request for key to url, with bearer as the
// Authorization (or, when bearer is empty, the client certificate of
// tlsCfg), and returns the credentials fabricd issued.
func post(ctx context.Context, tlsCfg *tls.Config, timeout time.Duration, url, bearer, name string, key crypto.Signer) (contract.Credentials, error) {
	csr, err := pki.NewCSR(key, name)
	if err != nil {
		return contract.Credentials{}, err
	}
	body, _ := json.Marshal(contract.EnrollRequest{Name: name, CSR: string(csr)})
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return contract.Credentials{}, fmt.Errorf("credentials: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, Proxy: http.ProxyFromEnvironment}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return contract.Credentials{}, fmt.Errorf("credentials: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return contract.Credentials{}, fmt.Errorf("credentials: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil && e.Error.Message != "" {
			return contract.Credentials{}, &RefusedError{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message}
		}
		return contract.Credentials{}, &RefusedError{Status: resp.StatusCode, Message: strings.TrimSpace(string(data))}
	}
	var creds contract.Credentials
	if err := json.Unmarshal(data, &creds); err != nil {
		return contract.Credentials{}, fmt.Errorf("credentials: fabricd's answer: %w", err)
	}
	cert, err := pki.ParseCert([]byte(creds.Certificate))
	if err != nil {
		return contract.Credentials{}, fmt.Errorf("credentials: fabricd's certificate: %w", err)
	}
	if cert.Subject.CommonName != name || !publicKeyIs(cert, key) {
		return contract.Credentials{}, errors.New("credentials: fabricd's certificate is not for this endpoint's key")
	}
	if len(creds.EtcdEndpoints) == 0 {
		return contract.Credentials{}, errors.New("credentials: fabricd gave no etcd endpoints")
	}
	return creds, nil
}

// RefusedError is fabricd's refusal of an enrollment or a renewal.
type RefusedError struct {
	Status        int
	Code, Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("credentials: fabricd refused (%d %s): %s", e.Status, e.Code, e.Message)
}

func publicKeyIs(c *x509.Certificate, key crypto.Signer) bool {
	pub, ok := c.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(key.Public())
}

// save writes the credentials, the info file last (Load trusts a
// directory with an info file).
func save(dir, server string, creds contract.Credentials, keyPEM []byte) error {
	cert, _ := pki.ParseCert([]byte(creds.Certificate))
	in := info{Server: server, Endpoint: creds.Endpoint, EtcdEndpoints: creds.EtcdEndpoints, EtcdUser: creds.EtcdUser,
		CAFingerprint: creds.CAFingerprint, ExpiresAt: cert.NotAfter, ReceivedAt: time.Now()}
	data, _ := json.MarshalIndent(in, "", "  ")
	for _, f := range []struct {
		name string
		data []byte
	}{{FileCert, append(keyPEM, creds.Certificate...)}, {FileCA, []byte(creds.CA)}, {FileInfo, append(data, '\n')}} {
		if err := fsutil.WriteFile(filepath.Join(dir, f.name), f.data, 0o600); err != nil {
			return fmt.Errorf("credentials: %w", err)
		}
	}
	return nil
}

// Identity is an enrolled endpoint's credentials, loaded from its state
// directory; its certificate can change (Renew) while clients use it.
type Identity struct {
	dir  string
	info info
	ca   *x509.CertPool

	mu       sync.Mutex
	cert     *tls.Certificate
	leaf     *x509.Certificate
	replaced chan struct{} // closed when Reload takes new credentials
	lastErr  string        // of Reload, logged once
}

// Load reads the credentials in dir.
func Load(dir string) (*Identity, error) {
	data, err := os.ReadFile(filepath.Join(dir, FileInfo))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNotEnrolled
	}
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	id := &Identity{dir: dir, replaced: make(chan struct{})}
	if err := json.Unmarshal(data, &id.info); err != nil {
		return nil, fmt.Errorf("credentials: %s: %w", FileInfo, err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, FileCA))
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	id.ca = x509.NewCertPool()
	if !id.ca.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("credentials: %s holds no certificate", FileCA)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, FileCert), filepath.Join(dir, FileCert))
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	id.setCert(&pair)
	return id, nil
}

func (id *Identity) setCert(pair *tls.Certificate) {
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	id.mu.Lock()
	id.cert, id.leaf = pair, leaf
	id.mu.Unlock()
}

// Endpoint is the endpoint's name (its certificate's Common Name).
func (id *Identity) Endpoint() string {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.info.Endpoint
}

// EtcdEndpoints are the etcd URLs fabricd gave.
func (id *Identity) EtcdEndpoints() []string {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.info.EtcdEndpoints
}

// Expiry is when the current certificate expires.
func (id *Identity) Expiry() time.Time {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.leaf.NotAfter
}

// TLSConfig is a client configuration that trusts the CA and presents
// the current certificate (a renewed one from the next connection on).
func (id *Identity) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12, RootCAs: id.ca,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			id.mu.Lock()
			defer id.mu.Unlock()
			return id.cert, nil
		},
	}
}

// RenewAt is when the certificate should be renewed: after two thirds
// of its lifetime from when it arrived.
func (id *Identity) RenewAt() time.Time {
	id.mu.Lock()
	defer id.mu.Unlock()
	from := id.info.ReceivedAt
	if from.IsZero() || from.After(id.leaf.NotAfter) {
		from = id.leaf.NotBefore
	}
	return from.Add(id.leaf.NotAfter.Sub(from) * 2 / 3)
}

// Renew gets a new certificate for a new key from fabricd, authenticated
// by the current one, and stores it.
func (id *Identity) Renew(ctx context.Context) error {
	key, err := pki.NewKey()
	if err != nil {
		return err
	}
	id.mu.Lock()
	server, name := id.info.Server, id.info.Endpoint
	id.mu.Unlock()
	creds, err := post(ctx, id.TLSConfig(), 0, server+contract.PathRenew, "", name, key)
	if err != nil {
		return err
	}
	keyPEM, err := pki.EncodeKey(key)
	if err != nil {
		return err
	}
	if err := save(id.dir, server, creds, keyPEM); err != nil {
		return err
	}
	pair, err := tls.X509KeyPair([]byte(creds.Certificate), keyPEM)
	if err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	fresh, err := Load(id.dir)
	if err != nil {
		return err
	}
	id.mu.Lock()
	id.info = fresh.info
	id.mu.Unlock()
	id.setCert(&pair)
	return nil
}

// Reload reads the credentials in the state directory again and takes
// them when they differ from those in use (the host enrolled again, after
// a revocation, while the agent ran): new connections present them, and
// Replaced's channel closes, so that clients connected with the old
// certificate can reconnect. It reports whether it changed anything.
// Credentials of another endpoint or another CA need a restart.
func (id *Identity) Reload() (bool, error) {
	fresh, err := Load(id.dir)
	if err != nil {
		return false, err
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if bytes.Equal(fresh.leaf.Raw, id.leaf.Raw) && reflect.DeepEqual(fresh.info, id.info) {
		return false, nil
	}
	if fresh.info.Endpoint != id.info.Endpoint {
		return false, fmt.Errorf("credentials: %s now holds endpoint %q's credentials, not %q's: restart the agent to change its name",
			id.dir, fresh.info.Endpoint, id.info.Endpoint)
	}
	if fresh.info.CAFingerprint != id.info.CAFingerprint {
		return false, fmt.Errorf("credentials: %s now trusts another CA (%s): restart the agent to use it", id.dir, fresh.info.CAFingerprint)
	}
	id.info, id.cert, id.leaf = fresh.info, fresh.cert, fresh.leaf
	close(id.replaced)
	id.replaced = make(chan struct{})
	return true, nil
}

// Replaced returns a channel that closes when Reload next takes new
// credentials.
func (id *Identity) Replaced() <-chan struct{} {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.replaced
}

// FileCheckInterval is how often RenewLoop looks for new credentials in
// the state directory.
var FileCheckInterval = 5 * time.Second

// RenewLoop renews the certificate at RenewAt, retrying failures every
// retry (a minute when 0), and takes credentials written to the state
// directory meanwhile (Reload), until ctx ends. It logs what it does.
func (id *Identity) RenewLoop(ctx context.Context, retry time.Duration, logger *slog.Logger) {
	if retry <= 0 {
		retry = time.Minute
	}
	retryAt := time.Time{}
	check := time.NewTicker(FileCheckInterval)
	defer check.Stop()
	for {
		at := id.RenewAt()
		if retryAt.After(at) {
			at = retryAt
		}
		renew := time.NewTimer(time.Until(at))
		select {
		case <-ctx.Done():
			renew.Stop()
			return
		case <-check.C:
			renew.Stop()
			changed, err := id.Reload()
			msg := ""
			if err != nil {
				msg = err.Error()
			}
			id.mu.Lock()
			repeated := msg == id.lastErr
			id.lastErr = msg
			id.mu.Unlock()
			switch {
			case err != nil && !repeated: // once per distinct error, not every check
				logger.Warn("stored credentials not reloaded", "dir", id.dir, "err", err)
			case changed:
				retryAt = time.Time{}
				logger.Info("credentials reloaded from the state directory", "dir", id.dir, "certificate_expires", id.Expiry())
			}
		case <-renew.C:
			if err := id.Renew(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				logger.Warn("certificate renewal failed; retrying", "err", err, "retry_in", retry)
				retryAt = time.Now().Add(retry)
				continue
			}
			retryAt = time.Time{}
		}
	}
}
