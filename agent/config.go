package agent

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/multiplane/multiplane/internal/cliconf"
	"github.com/multiplane/multiplane/internal/version"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults.
const (
	DefaultStatusInterval = 10 * time.Second
	// DefaultEvidenceInterval is how often the agent looks for a change
	// in its peers' reachability (see Evidence).
	DefaultEvidenceInterval = 250 * time.Millisecond
	DefaultLeaseTTL         = 10 * time.Second
	// DefaultStatusSpread: see Config.StatusSpread.
	DefaultStatusSpread = 500 * time.Millisecond
	DefaultDialTimeout  = 5 * time.Second
	DefaultStateDir     = "/var/lib/multiplane/endpoint"
)

// Config configures an Agent. Zero fields take the documented defaults.
type Config struct {
	// Endpoint is the endpoint's name in the topology (default: the host
	// name).
	Endpoint string

	// EtcdEndpoints are the etcd client URLs; ignored when Client is set.
	EtcdEndpoints []string
	// EtcdDialTimeout bounds each connection attempt (default 5 s).
	EtcdDialTimeout time.Duration
	// EtcdCAFile, EtcdCertFile and EtcdKeyFile configure TLS to etcd.
	EtcdCAFile, EtcdCertFile, EtcdKeyFile string
	// EtcdTLS, when set, is the TLS configuration to etcd (an enrolled
	// endpoint's, credentials.Identity.TLSConfig); it overrides the files.
	EtcdTLS *tls.Config
	// Redial, if set, returns a channel that closes when the agent should
	// reconnect to etcd with a new client (the credentials behind EtcdTLS
	// were replaced: credentials.Identity.Replaced); ignored with Client.
	Redial func() <-chan struct{}
	// Client is a ready etcd client shared with other agents; the agent
	// does not close it. When nil the agent opens (and closes) its own.
	Client *clientv3.Client
	// WatchStream names the gRPC watch stream of Client the agent's
	// watches use: agents with the same name share one (default: the
	// endpoint name, a stream per agent). etcd queues at most 128
	// responses per stream before it treats the stream's watchers as slow
	// (delivered by a 100 ms resync), so agents sharing a stream should be
	// a few tens at most. Measured with 4,000 agents in one process on 2
	// busy cores, generation key write to apply: 2 clients sharing 2
	// streams, p99 18 s; 2 clients with a stream per agent, etcd
	// overloaded; 16 clients with a stream per agent, p99 0.26 s (etcd in
	// another process), 9 goroutines and 71 KiB per agent; 16 clients
	// and 256 streams, p99 0.35 s, 5 goroutines and 44 KiB per agent.
	WatchStream string

	// StateDir holds <endpoint>.lkg.json, the last known good document
	// (empty: none is kept).
	StateDir string
	// Planes is the number of local planes the documents are validated
	// against (0: len(Addresses), else ask the Applier if it has a
	// Planes() int method).
	Planes int
	// Addresses are the local per-plane addresses, in plane order
	// (optional). A document that gives a plane another address is still
	// applied (its steering is right) but the mismatch is reported in the
	// status: the topology and this host disagree about who it is.
	Addresses []netip.Addr

	// StatusInterval is how often the status is refreshed when it changed
	// (default 10 s; with traffic every agent then writes once per interval,
	// so 4,000 endpoints write 400 statuses a second).
	StatusInterval time.Duration
	// StatusSpread: a status write an apply (or a new error) calls for
	// waits a random time from half of this to one and a half times this
	// (writes spread over this long, starting once most agents have the
	// generation), so thousands of agents applying one generation do not
	// all write to etcd at once while others still receive it (default
	// 500 ms; negative: at once).
	// Evidence is not delayed. A generation asking for a longer spread
	// (contract.GenerationDoc.StatusSpreadMS, sized to the fleet) gets it.
	StatusSpread time.Duration
	// EvidenceInterval is how often the agent checks whether a plane's
	// reachability verdict changed, to report it at once (default 250 ms;
	// only with an Applier that judges reachability, as
	// TransportApplier does).
	EvidenceInterval time.Duration
	// LeaseTTL is the TTL of the status lease (default 10 s).
	LeaseTTL time.Duration
	// Lease, when set, is a lease shared by many agents (kept alive by its
	// owner): the status is written under it, and deleted, not revoked,
	// when the agent stops.
	Lease clientv3.LeaseID

	// Version is reported in the status (default: the binary's build info).
	Version string
	// OnApplied, if set, is called after each successful apply (from etcd,
	// or from the last-known-good file at start) with the generation
	// applied and the time Apply returned, once the document is saved as
	// the last known good one (when StateDir is set). It must not block.
	OnApplied func(gen uint64, at time.Time)
}

// RegisterFlags registers the agent's flags on fs. The command parses them
// with internal/cliconf, which gives each an ENDPOINT_* environment twin.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Endpoint, "name", c.Endpoint, "this endpoint's name in the topology (default: the host name)")
	fs.Func("etcd-endpoints", "comma-separated etcd client URLs (default: those endpoint enroll stored in --state-dir)", func(s string) error {
		c.EtcdEndpoints = cliconf.SplitList(s)
		return nil
	})
	fs.DurationVar(&c.EtcdDialTimeout, "etcd-dial-timeout", DefaultDialTimeout, "timeout of each attempt to connect to etcd")
	fs.StringVar(&c.EtcdCAFile, "etcd-ca", "", "CA bundle (PEM) to verify etcd")
	fs.StringVar(&c.EtcdCertFile, "etcd-cert", "", "client certificate (PEM) for etcd")
	fs.StringVar(&c.EtcdKeyFile, "etcd-key", "", "client key (PEM) for etcd")
	fs.StringVar(&c.StateDir, "state-dir", DefaultStateDir, "directory of the last-known-good document (<name>.lkg.json); empty keeps none")
	fs.IntVar(&c.Planes, "planes", 0, "number of local planes documents are checked against (default: the transport's)")
	fs.Func("addresses", "comma-separated local per-plane IP addresses, in plane order, checked against the documents (optional)", func(s string) error {
		c.Addresses = nil
		for _, e := range cliconf.SplitList(s) {
			a, err := netip.ParseAddr(e)
			if err != nil {
				return err
			}
			c.Addresses = append(c.Addresses, a)
		}
		return nil
	})
	fs.DurationVar(&c.StatusInterval, "status-interval", DefaultStatusInterval, "how often the status in etcd is refreshed")
	fs.DurationVar(&c.StatusSpread, "status-spread", DefaultStatusSpread, "a status write an apply calls for waits a random time from half to 1.5 times this (or the generation's status_spread_ms when longer), so many agents applying one generation do not write at once, nor while others still receive it (negative: at once)")
	fs.DurationVar(&c.EvidenceInterval, "evidence-interval", DefaultEvidenceInterval, "how often a change in the peers' reachability per plane is looked for (reported at once)")
	fs.DurationVar(&c.LeaseTTL, "status-lease-ttl", DefaultLeaseTTL, "TTL of the lease the status is written under")
}

// ErrConfig is wrapped by configuration errors.
var ErrConfig = errors.New("agent: invalid configuration")

func (c Config) withDefaults() (Config, error) {
	if c.Endpoint == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			return c, fmt.Errorf("%w: no endpoint name and no host name", ErrConfig)
		}
		c.Endpoint = h
	}
	if strings.ContainsAny(c.Endpoint, "/\x00") || c.Endpoint == "." || c.Endpoint == ".." {
		return c, fmt.Errorf("%w: endpoint name %q", ErrConfig, c.Endpoint)
	}
	if c.Client == nil && len(c.EtcdEndpoints) == 0 {
		return c, fmt.Errorf("%w: no etcd endpoints (enroll with endpoint enroll, or give --etcd-endpoints)", ErrConfig)
	}
	if c.WatchStream == "" {
		c.WatchStream = c.Endpoint
	}
	if c.EtcdDialTimeout <= 0 {
		c.EtcdDialTimeout = DefaultDialTimeout
	}
	if c.StatusInterval <= 0 {
		c.StatusInterval = DefaultStatusInterval
	}
	if c.EvidenceInterval <= 0 {
		c.EvidenceInterval = DefaultEvidenceInterval
	}
	if c.StatusSpread == 0 {
		c.StatusSpread = DefaultStatusSpread
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.LeaseTTL < 2*time.Second {
		return c, fmt.Errorf("%w: status lease TTL %v is under 2s", ErrConfig, c.LeaseTTL)
	}
	if c.Planes < 0 {
		return c, fmt.Errorf("%w: %d planes", ErrConfig, c.Planes)
	}
	if c.Planes == 0 {
		c.Planes = len(c.Addresses)
	}
	if len(c.Addresses) > 0 && len(c.Addresses) != c.Planes {
		return c, fmt.Errorf("%w: %d addresses for %d planes", ErrConfig, len(c.Addresses), c.Planes)
	}
	if c.Version == "" {
		c.Version = version.Get().Short()
	}
	return c, nil
}
