package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/multiplane/multiplane/agent"
	"github.com/multiplane/multiplane/agent/credentials"
	"github.com/multiplane/multiplane/internal/cliconf"
)

const enrollUsage = `Usage: endpoint enroll --server https://FABRICD:PORT --token T --name NAME [--state-dir D] [--ca-fingerprint sha256:...]

Enrolls this host as endpoint NAME: makes a private key here (it never
leaves the host), sends a certificate request with the one-time bootstrap
token an operator minted (POST /api/v1/enrollment-tokens) and stores the
certificate, the CA and the etcd URLs under --state-dir (0700, files 0600).
endpoint run then finds them there. Pin fabricd's CA on first contact with
--ca-fingerprint (the token's ca_fingerprint, or fabricd's log) or give it
with --ca-file.

Exit status: 0 enrolled, 1 refused or unreachable, 2 usage errors.

`

func runEnroll(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var o credentials.EnrollOptions
	fs := flag.NewFlagSet("endpoint enroll", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Server, "server", "", "fabricd's API, https://HOST:PORT (required)")
	fs.StringVar(&o.Token, "token", "", "the one-time bootstrap token (required; prefer the environment twin, which ps does not show)")
	fs.StringVar(&o.Name, "name", "", "this endpoint's name in the topology, the token's endpoint (required)")
	fs.StringVar(&o.StateDir, "state-dir", agent.DefaultStateDir, "directory the credentials are stored in (endpoint run --state-dir)")
	fs.StringVar(&o.CAFingerprint, "ca-fingerprint", "", "sha256:<hex> of fabricd's CA, to trust it on first contact")
	fs.StringVar(&o.CAFile, "ca-file", "", "CA bundle (PEM) to verify fabricd with instead (default: the system's roots)")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Second, "how long to wait for fabricd")
	if err := cliconf.Parse(fs, args, "ENDPOINT_ENROLL"); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, "\n"+enrollUsage)
			return 0
		}
		fmt.Fprintln(stderr, "endpoint enroll:", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "endpoint enroll: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if o.Server == "" || o.Token == "" || o.Name == "" {
		fmt.Fprintln(stderr, "endpoint enroll: --server, --token and --name are required")
		return 2
	}
	creds, err := credentials.Enroll(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "endpoint enroll:", err)
		return 1
	}
	fmt.Fprintf(stdout, "enrolled %s: certificate until %s, etcd %v, stored in %s\n",
		creds.Endpoint, creds.ExpiresAt.Format(time.RFC3339), creds.EtcdEndpoints, o.StateDir)
	return 0
}
