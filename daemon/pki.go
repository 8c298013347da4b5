package daemon

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/multiplane/multiplane/kv"
	"github.com/multiplane/multiplane/pki"
)

// serverCertTTL is the lifetime of the certificates fabricd issues itself
// (API, embedded etcd, its etcd root identity); they are issued again at
// every start.
const serverCertTTL = 365 * 24 * time.Hour

func (c *Config) pkiDir() string { return filepath.Join(c.DataDir, "pki") }

// loadCA loads --ca-cert/--ca-key, or the CA under the data directory,
// created on first start.
func loadCA(cfg Config, logger *slog.Logger) (*pki.CA, error) {
	var ca *pki.CA
	var err error
	switch {
	case cfg.CACert != "" || cfg.CAKey != "":
		if cfg.CACert == "" || cfg.CAKey == "" {
			return nil, errors.New("fabricd: --ca-cert and --ca-key go together")
		}
		ca, err = pki.Load(cfg.CACert, cfg.CAKey)
	default:
		ca, err = pki.LoadOrCreate(cfg.pkiDir())
	}
	if err != nil {
		return nil, fmt.Errorf("fabricd: %w", err)
	}
	logger.Info("certificate authority", "fingerprint", ca.Fingerprint(), "cert", caCertPath(cfg))
	return ca, nil
}

func caCertPath(cfg Config) string {
	if cfg.CACert != "" {
		return cfg.CACert
	}
	return filepath.Join(cfg.pkiDir(), pki.CACertFile)
}

// issueFiles issues a certificate and key and writes them as
// pki/<name>.crt and pki/<name>.key.
func issueFiles(cfg Config, name string, issue func() ([]byte, []byte, error)) (certFile, keyFile string, err error) {
	certPEM, keyPEM, err := issue()
	if err != nil {
		return "", "", fmt.Errorf("fabricd: %w", err)
	}
	if err := os.MkdirAll(cfg.pkiDir(), 0o700); err != nil {
		return "", "", fmt.Errorf("fabricd: %w", err)
	}
	certFile, keyFile = filepath.Join(cfg.pkiDir(), name+".crt"), filepath.Join(cfg.pkiDir(), name+".key")
	if err := pki.WriteFile(keyFile, keyPEM); err != nil {
		return "", "", fmt.Errorf("fabricd: %w", err)
	}
	if err := pki.WriteFile(certFile, certPEM); err != nil {
		return "", "", fmt.Errorf("fabricd: %w", err)
	}
	return certFile, keyFile, nil
}

// secureEtcd configures the embedded etcd for clients beyond loopback:
// TLS with a server certificate for its addresses, client certificates of
// the CA, and fabricd's own certificate as etcd's root user.
func secureEtcd(cfg Config, ca *pki.CA, etcdCfg *kv.Config) error {
	host, _, _ := net.SplitHostPort(etcdCfg.Listen)
	hosts := []string{"127.0.0.1", "::1", "localhost"}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		hosts = append(hosts, localAddresses()...)
	} else {
		hosts = append(hosts, host)
	}
	if urls, err := etcdCfg.AdvertiseURLs(); err == nil {
		for _, u := range urls {
			if p, err := url.Parse(u); err == nil && p.Hostname() != "" {
				hosts = append(hosts, p.Hostname())
			}
		}
	}
	srvCert, srvKey, err := issueFiles(cfg, "etcd-server", func() ([]byte, []byte, error) {
		return ca.IssueServer("fabricd etcd", hosts, serverCertTTL)
	})
	if err != nil {
		return err
	}
	rootCert, rootKey, err := issueFiles(cfg, "etcd-root", func() ([]byte, []byte, error) {
		return ca.IssueClient(kv.RootUser, serverCertTTL)
	})
	if err != nil {
		return err
	}
	etcdCfg.ServerTLS = &kv.ServerTLS{CertFile: srvCert, KeyFile: srvKey, ClientCAFile: caCertPath(cfg)}
	etcdCfg.CAFile, etcdCfg.CertFile, etcdCfg.KeyFile = caCertPath(cfg), rootCert, rootKey
	etcdCfg.Gate = kv.NewGate()
	return nil
}

// apiTLS is the REST API's TLS configuration: --tls-cert/--tls-key, or a
// certificate from the CA for the listen address, --tls-hosts and this
// host's names. Client certificates of the CA are asked for (endpoints
// renew with theirs) but not required.
func apiTLS(cfg Config, ca *pki.CA) (*tls.Config, error) {
	certFile, keyFile := cfg.TLSCert, cfg.TLSKey
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("fabricd: --tls-cert and --tls-key go together")
	}
	if certFile == "" {
		hosts := append([]string{"127.0.0.1", "::1", "localhost"}, cfg.TLSHosts...)
		if h, _, err := net.SplitHostPort(cfg.Listen); err == nil && h != "" {
			if ip, err := netip.ParseAddr(h); err == nil && ip.IsUnspecified() {
				hosts = append(hosts, localAddresses()...)
			} else {
				hosts = append(hosts, h)
			}
		}
		if name, err := os.Hostname(); err == nil {
			hosts = append(hosts, name)
		}
		var err error
		if certFile, keyFile, err = issueFiles(cfg, "api", func() ([]byte, []byte, error) {
			return ca.IssueServer("fabricd", hosts, serverCertTTL)
		}); err != nil {
			return nil, err
		}
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("fabricd: API certificate: %w", err)
	}
	// Serve the CA after the leaf, so an endpoint can pin its fingerprint.
	pair.Certificate = append(pair.Certificate, ca.Cert.Raw)
	return &tls.Config{
		Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12,
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: ca.Pool(),
	}, nil
}

// localAddresses are this host's unicast interface addresses.
func localAddresses() []string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []string
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if ok && (n.IP.IsGlobalUnicast() || n.IP.IsLoopback()) {
			out = append(out, n.IP.String())
		}
	}
	return out
}
