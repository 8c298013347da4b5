package telemetry

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/multiplane/multiplane/planes"
)

// transportCreds builds the transport credentials of a target. Files are
// read at every connect, so a renewed certificate is picked up.
func transportCreds(t planes.GNMITarget) (grpc.DialOption, error) {
	if t.TLS == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.TLS.ServerName}
	if t.TLS.CA != "" {
		pem, err := os.ReadFile(t.TLS.CA)
		if err != nil {
			return nil, fmt.Errorf("%w: ca: %v", ErrCredentials, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: ca %s: no PEM certificate", ErrCredentials, t.TLS.CA)
		}
		cfg.RootCAs = pool
	}
	if t.TLS.Cert != "" {
		cert, err := tls.LoadX509KeyPair(t.TLS.Cert, t.TLS.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: client certificate: %v", ErrCredentials, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg)), nil
}

// password reads the password from the environment variable the topology
// names. The topology validator already enforces these rules; they are
// checked again here, at use, so no other path (a topology built in Go, an
// older stored document) can make fabricd send another of its variables,
// or send a password in plaintext unless the switch entry allows it. The
// value is never logged.
func password(t planes.GNMITarget) (string, error) {
	if t.PasswordEnv == "" {
		return "", nil
	}
	if !strings.HasPrefix(t.PasswordEnv, planes.PasswordEnvPrefix) || len(t.PasswordEnv) == len(planes.PasswordEnvPrefix) {
		return "", fmt.Errorf("%w: password_env %q does not start with %s: refused", ErrCredentials, t.PasswordEnv, planes.PasswordEnvPrefix)
	}
	if t.TLS == nil && !t.AllowPlaintextPassword {
		return "", fmt.Errorf("%w: a password over a connection without TLS needs allow_plaintext_password: true", ErrCredentials)
	}
	pw, ok := os.LookupEnv(t.PasswordEnv)
	if !ok {
		return "", fmt.Errorf("%w: environment variable %s is not set", ErrCredentials, t.PasswordEnv)
	}
	return pw, nil
}
