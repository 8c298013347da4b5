// Package daemon wires fabricd's components together and runs them until
// its context ends: the private PostgreSQL (or an external one), migrations,
// etcd (embedded or external), the inventory, API tokens, the audit log and
// the REST API with its metrics. cmd/fabricd only parses flags and calls Run.
//
//	cfg := daemon.DefaultConfig()
//	err := daemon.Run(ctx, cfg, logger) // returns nil after a clean shutdown
package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/multiplane/multiplane/api"
	"github.com/multiplane/multiplane/audit"
	"github.com/multiplane/multiplane/auth"
	"github.com/multiplane/multiplane/demo/democtl"
	"github.com/multiplane/multiplane/enrollment"
	"github.com/multiplane/multiplane/events"
	"github.com/multiplane/multiplane/evidence"
	"github.com/multiplane/multiplane/history"
	"github.com/multiplane/multiplane/intents"
	"github.com/multiplane/multiplane/internal/cliconf"
	"github.com/multiplane/multiplane/internal/version"
	"github.com/multiplane/multiplane/inventory"
	"github.com/multiplane/multiplane/kv"
	"github.com/multiplane/multiplane/planes"
	"github.com/multiplane/multiplane/policy"
	"github.com/multiplane/multiplane/policy/fleet"
	"github.com/multiplane/multiplane/policy/publish"
	"github.com/multiplane/multiplane/shard"
	"github.com/multiplane/multiplane/store"
	"github.com/multiplane/multiplane/store/pgcluster"
	"github.com/multiplane/multiplane/telemetry"
)

// Config is fabricd's configuration.
type Config struct {
	Listen          string
	DataDir         string
	DatabaseURL     string
	Topology        string
	MaxBodyBytes    int64
	HTTP            api.Limits
	ShutdownTimeout time.Duration
	Pprof           bool
	TLS             bool     // serve the API over TLS
	TLSCert, TLSKey string   // the API's certificate (default: issued by the CA)
	TLSHosts        []string // more names and addresses for the issued API certificate
	CACert, CAKey   string   // the CA (default: created under DataDir/pki)
	EndpointCertTTL time.Duration
	Etcd            kv.Config
	Health          planes.HealthConfig
	Policy          policy.Config
	Publish         publish.Config
	Telemetry       telemetry.Config
	Sharding        bool // replicas share the switches (package shard)
	Shard           shard.Config
	History         history.Config
	// DemoControl is the demo's fault control (democtl), with the file
	// of its secret; empty outside the demo.
	DemoControl, DemoControlSecretFile string
}

// DefaultConfig returns the defaults of every setting.
func DefaultConfig() Config {
	return Config{
		Listen: "127.0.0.1:8080", DataDir: "./var", MaxBodyBytes: api.DefaultMaxBodyBytes, HTTP: api.DefaultLimits(),
		ShutdownTimeout: 10 * time.Second, Etcd: kv.Config{DialTimeout: 5 * time.Second}, EndpointCertTTL: enrollment.DefaultCertTTL,
		Health: planes.DefaultHealthConfig(), Policy: policy.DefaultConfig(), Publish: publish.DefaultConfig(),
		History: history.DefaultConfig(), Sharding: true, Shard: shard.DefaultConfig(),
	}
}

// RegisterFlags registers every setting on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", c.Listen, "address of the REST API, dashboard and /metrics")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory for the private PostgreSQL, embedded etcd and admin.token")
	fs.StringVar(&c.DatabaseURL, "database-url", c.DatabaseURL, "PostgreSQL URL of an external server (default: a private cluster under --data-dir)")
	fs.StringVar(&c.Topology, "topology", c.Topology, "topology file (YAML or JSON) to load at start; see docs/topology.md")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest request body the API accepts")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "time to finish in-flight requests on SIGINT/SIGTERM")
	fs.BoolVar(&c.Pprof, "pprof", c.Pprof, "serve Go profiles at /debug/pprof/ on the API address (unauthenticated: keep it on loopback)")
	fs.BoolVar(&c.TLS, "tls", c.TLS, "serve the REST API over TLS (HTTPS), with a certificate from the CA unless --tls-cert is given; endpoints enroll only over TLS")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "the API's TLS certificate (PEM; with --tls-key)")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "the API's TLS key (PEM)")
	fs.Func("tls-hosts", "comma-separated extra DNS names and IPs for the API certificate fabricd issues itself (the listen address, localhost and the host name are always in it)", func(s string) error {
		c.TLSHosts = cliconf.SplitList(s)
		return nil
	})
	fs.StringVar(&c.CACert, "ca-cert", c.CACert, "CA certificate (PEM) to issue from, with --ca-key (default: a CA fabricd creates under --data-dir/pki on first start)")
	fs.StringVar(&c.CAKey, "ca-key", c.CAKey, "CA private key (PEM)")
	fs.DurationVar(&c.EndpointCertTTL, "endpoint-cert-ttl", c.EndpointCertTTL, "lifetime of the certificates enrolled endpoints get (they renew after two thirds of it)")
	c.Etcd.RegisterFlags(fs)
	c.Health.RegisterFlags(fs)
	c.Telemetry.RegisterFlags(fs)
	fs.BoolVar(&c.Sharding, "telemetry-sharding", c.Sharding, "replicas share the switches: each switch is streamed by one replica, which the others take their view of through etcd (false: every replica streams every switch)")
	fs.IntVar(&c.Shard.TTL, "telemetry-shard-ttl", c.Shard.TTL, "lease of a replica's switches in seconds: a dead replica's switches move to the others after about this long")
	fs.DurationVar(&c.Shard.PublishEvery, "telemetry-shard-publish-every", c.Shard.PublishEvery, "how often a replica rewrites its switches' views (traffic figures) for the others, besides on every state change")
	fs.DurationVar(&c.Shard.HandoverTimeout, "telemetry-shard-handover-timeout", c.Shard.HandoverTimeout, "at shutdown, longest wait for the other replicas to take this one's switches over")
	fs.IntVar(&c.History.MaxLinks, "history-max-links", c.History.MaxLinks, "keep per-link series (1 h at 1 s, a day at 1 min; about 120 KiB a link) for topologies of at most this many links; plane series are always kept")
	c.HTTP.RegisterFlags(fs)
	fs.IntVar(&c.Policy.Entropy, "policy-entropy", c.Policy.Entropy, "paths (UDP source ports) per plane in every path set")
	fs.DurationVar(&c.Publish.Debounce, "publish-debounce", c.Publish.Debounce, "pause in changes that starts a policy computation")
	fs.DurationVar(&c.Publish.MaxDelay, "publish-max-delay", c.Publish.MaxDelay, "longest a burst of changes can hold a computation back")
	fs.IntVar(&c.Publish.StatusWriteRate, "status-write-rate", c.Publish.StatusWriteRate, "status writes a second the agents may make together after applying a generation: they spread them over endpoints / rate")
	fs.DurationVar(&c.Publish.HoldQuiet, "publish-hold-quiet", c.Publish.HoldQuiet, "pause in health changes (links, switches) that ends their burst and publishes it (a plane going down publishes at once)")
	fs.DurationVar(&c.Publish.HoldMax, "publish-hold-max", c.Publish.HoldMax, "longest a burst of health changes can hold a publication back")
	fs.IntVar(&c.Publish.HoldBurst, "publish-hold-burst", c.Publish.HoldBurst, "health changes in one burst that make it a switch or plane failing, held up to --publish-hold-burst-max")
	fs.DurationVar(&c.Publish.HoldBurstMax, "publish-hold-burst-max", c.Publish.HoldBurstMax, "longest a burst of at least --publish-hold-burst health changes can hold a publication back (a plane going down publishes at once)")
	fs.DurationVar(&c.Publish.HoldBurstQuiet, "publish-hold-burst-quiet", c.Publish.HoldBurstQuiet, "pause in health changes that ends a burst of at least --publish-hold-burst of them (a loaded fabricd pauses mid-failure)")
	fs.DurationVar(&c.Publish.HoldRecoverMax, "publish-hold-recover-max", c.Publish.HoldRecoverMax, "longest a burst of recoveries only (links, switches, planes coming back) can hold a publication back: published mid-recovery, every endpoint whose link is not back yet is written twice")
	fs.IntVar(&c.Publish.MaxTxnOps, "publish-max-txn-ops", c.Publish.MaxTxnOps, "most operations in one etcd transaction (etcd's --max-txn-ops)")
	fs.IntVar(&c.Publish.ParallelTxns, "publish-parallel-txns", c.Publish.ParallelTxns, "etcd transactions in flight at once when publishing")
	fs.DurationVar(&c.Publish.ReconcileEvery, "publish-reconcile-every", c.Publish.ReconcileEvery, "how often the policy leader re-reads its etcd documents and repairs drift")
	fs.IntVar(&c.Publish.SessionTTL, "leader-ttl", c.Publish.SessionTTL, "leader lease in seconds: a dead leader is replaced after about this long")
	fs.StringVar(&c.DemoControl, "demo-control", c.DemoControl, "URL of the demo's fault control (set by bin/demo): operators fail and restore its planes and ports through /api/v1/demo")
	fs.StringVar(&c.DemoControlSecretFile, "demo-control-secret-file", c.DemoControlSecretFile, "file holding the demo control's secret (with --demo-control)")
	fs.StringVar(&c.Publish.ID, "replica-id", c.Publish.ID, "name of this fabricd replica in leader election")
}

// demoControl is the client of --demo-control (nil without it).
func (c *Config) demoControl() (*democtl.Client, error) {
	if c.DemoControl == "" {
		if c.DemoControlSecretFile != "" {
			return nil, errors.New("--demo-control-secret-file without --demo-control")
		}
		return nil, nil
	}
	u, err := url.Parse(c.DemoControl)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--demo-control %q: want an http(s) URL", c.DemoControl)
	}
	if c.DemoControlSecretFile == "" {
		return nil, errors.New("--demo-control needs --demo-control-secret-file")
	}
	secret, err := os.ReadFile(c.DemoControlSecretFile)
	if err != nil {
		return nil, fmt.Errorf("--demo-control-secret-file: %w", err)
	}
	if s := strings.TrimSpace(string(secret)); s != "" {
		return &democtl.Client{URL: c.DemoControl, Secret: s}, nil
	}
	return nil, fmt.Errorf("--demo-control-secret-file %s is empty", c.DemoControlSecretFile)
}

// demoAPI is the API's demo control: none, not a nil client, without one.
func demoAPI(c *democtl.Client) api.DemoControl {
	if c == nil {
		return nil
	}
	return c
}

// AdminTokenPath is where the first admin token is written.
func (c *Config) AdminTokenPath() string { return filepath.Join(c.DataDir, "admin.token") }

// Run starts fabricd and blocks until ctx ends, then shuts down cleanly.
// Start-up errors are returned at once, after undoing what had started.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) (err error) {
	if err := cfg.Etcd.Validate(); err != nil {
		return fmt.Errorf("fabricd: %w", err)
	}
	cfg.Shard.ID = cfg.Publish.ID
	if err := cfg.Shard.Validate(); cfg.Sharding && err != nil {
		return fmt.Errorf("fabricd: %w", err)
	}
	demo, err := cfg.demoControl()
	if err != nil {
		return fmt.Errorf("fabricd: %w", err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("fabricd: data dir: %w", err)
	}
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()

	dbURL := cfg.DatabaseURL
	var cluster *pgcluster.Cluster // the private one, if any
	if dbURL == "" {
		var err error
		cluster, err = startPostgres(ctx, cfg.DataDir, logger)
		if err != nil {
			return fmt.Errorf("fabricd: private PostgreSQL: %w", err)
		}
		closers = append(closers, func() { stopPostgres(cluster, logger) })
		dbURL = cluster.URL()
	}
	db, err := store.Open(ctx, dbURL, logger)
	if err != nil {
		return fmt.Errorf("fabricd: %w", err)
	}
	closers = append(closers, db.Close)
	if err := db.Migrate(ctx); err != nil {
		return fmt.Errorf("fabricd: %w", err)
	}

	ca, err := loadCA(cfg, logger)
	if err != nil {
		return err
	}
	etcdCfg := cfg.Etcd
	etcdCfg.DataDir = cfg.DataDir
	beyond, err := etcdCfg.Beyond()
	if err != nil {
		return fmt.Errorf("fabricd: %w", err)
	}
	if beyond {
		if err := secureEtcd(cfg, ca, &etcdCfg); err != nil {
			return err
		}
	}
	kvs, err := kv.Open(ctx, etcdCfg, logger.With("component", "etcd"))
	if err != nil {
		return fmt.Errorf("fabricd: %w", err)
	}
	closers = append(closers, func() { kvs.Close() })

	tokens := auth.NewTokens(db.Pool())
	if err := ensureAdmin(ctx, tokens, cfg, logger); err != nil {
		return err
	}

	inv := inventory.New(db.Pool())
	// Agents' applied generations, one series per topology endpoint.
	agents := fleet.New(kvs.Client).Collector(func(ctx context.Context) ([]string, error) {
		snap, err := inv.Current(ctx)
		if err != nil {
			return nil, err
		}
		names := make([]string, len(snap.Topology.Endpoints))
		for i, e := range snap.Topology.Endpoints {
			names[i] = e.Name
		}
		return names, nil
	})
	if cfg.Topology != "" {
		if err := loadTopology(ctx, inv, cfg.Topology, logger); err != nil {
			return err
		}
	}
	enroll, err := newEnrollment(ctx, cfg, etcdCfg, db, ca, kvs, inv, logger)
	if err != nil {
		return err
	}

	// Health: engine fed by telemetry, transitions on the bus, history in Postgres.
	bus := planes.NewBus()
	engine := planes.NewEngine(cfg.Health, planes.SystemClock{}, bus, logger.With("component", "health"))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo(), db.Collector(), engine.Collector())
	if cluster != nil {
		reg.MustRegister(cluster.Collector())
	}
	evStore := events.New(db.Pool())
	intentStore := intents.New(db.Pool())
	publisher := publish.New(kvs.Client, cfg.Publish, logger.With("component", "publish"))
	reg.MustRegister(publisher.Collector())
	collector, err := telemetry.New(cfg.Telemetry, engine, logger.With("component", "telemetry"))
	if err != nil {
		return fmt.Errorf("fabricd: %w", err)
	}
	if err := collector.Register(reg); err != nil {
		return fmt.Errorf("fabricd: %w", err)
	}
	var sharder *shard.Sharder
	if cfg.Sharding {
		collector.Select(map[string]bool{}) // until ownership is known
		if sharder, err = shard.New(kvs.Client, cfg.Shard, engine, collector, logger.With("component", "shard")); err != nil {
			return fmt.Errorf("fabricd: %w", err)
		}
		if err := sharder.Register(reg); err != nil {
			return fmt.Errorf("fabricd: %w", err)
		}
	}
	// The agents' own traffic judges the links of switches whose telemetry
	// is unreachable.
	linkEvidence := evidence.New(kvs.Client, engine, logger.With("component", "evidence"))
	recorder := history.New(cfg.History, engine)
	reg.MustRegister(linkEvidence.Collector(), agents)
	fabric, err := newFabricView(ctx, fabricDeps{db: db, inv: inv, engine: engine, events: evStore, intents: intentStore,
		publisher: publisher, collector: collector, sharder: sharder, evidence: linkEvidence, history: recorder, policy: cfg.Policy, onTopology: enroll.kick}, logger)
	if err != nil {
		return err
	}
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	closers = append(closers, func() { stopBG(); wg.Wait() })
	// The history must not lose transitions: its subscription queues what
	// the writer has not taken yet instead of dropping it.
	evSub := bus.SubscribeQueued(events.SubscriptionBuffer, events.SubscriptionLimit)
	evWriter := events.NewWriter(evStore, logger.With("component", "events"))
	reg.MustRegister(evWriter.Collector())
	evWriter.Writes = publisher.Recording // replicas see the same transitions; the leader records them
	evWriter.States = engine.States       // and, taking over, what changed while none did
	evWriter.Term = publisher.Term        // a deposed leader's writes are refused
	if cluster != nil {
		// A private PostgreSQL that dies (OOM killer, kill -9) is restarted on
		// the same socket; the pool then drops its dead connections.
		wg.Go(func() { cluster.Supervise(bg, pgcluster.Supervision{OnRestart: db.Pool().Reset}) })
	}
	wg.Go(func() { evWriter.Run(bg, evSub) })
	wg.Go(func() { engine.Run(bg, 50*time.Millisecond) })
	wg.Go(func() { fabric.follow(bg, 30*time.Second) })
	wg.Go(func() { fabric.listen(bg) })
	publisher.SetPlanesNow(fabric.planesNow)
	wg.Go(func() { publisher.Run(bg, fabric.compute) })
	wg.Go(func() { collector.Run(bg) })
	if sharder != nil {
		wg.Go(func() { sharder.Run(bg) })
	}
	wg.Go(func() { linkEvidence.Run(bg) })
	wg.Go(func() { recorder.Run(bg) })
	wg.Go(func() { enroll.run(bg) })
	healthSub := bus.Subscribe(1024)
	wg.Go(func() { fabric.triggerOnChanges(bg, healthSub) })

	handler := api.New(api.Deps{
		Inventory: inv, Tokens: tokens, Audit: audit.New(db.Pool()), Health: engine, Events: evStore, Bus: bus,
		Logger: logger.With("component", "api"), Registry: reg, MaxBodyBytes: cfg.MaxBodyBytes, Limits: cfg.HTTP,
		Intents: intentStore, Fleet: fleet.New(kvs.Client), History: recorder, PolicyInput: fabric.policyInput, PolicyConfig: cfg.Policy,
		Enrollment: enroll.svc, Demo: demoAPI(demo),
		Ready:      func(ctx context.Context) error { return readiness(ctx, db, kvs) },
		OnTopology: fabric.topologyChanged,
		OnIntents:  fabric.intentsChanged,
	})

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("fabricd: listen: %w", err)
	}
	var root http.Handler = handler
	if cfg.Pprof {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.Handle("/", handler)
		root = mux
	}
	srv := handler.HTTPServer(logger)
	srv.Handler = root
	scheme := "http"
	if cfg.TLS {
		if srv.TLSConfig, err = apiTLS(cfg, ca); err != nil {
			ln.Close()
			return err
		}
		scheme = "https"
	}
	serveErr := make(chan error, 1)
	go func() {
		if cfg.TLS {
			// The handshake runs under the server's read timeouts.
			serveErr <- srv.ServeTLS(handler.LimitListener(ln), "", "")
			return
		}
		serveErr <- srv.Serve(handler.LimitListener(ln))
	}()
	logger.Info("fabricd ready", "api", scheme+"://"+ln.Addr().String()+"/api/v1", "admin_token", cfg.AdminTokenPath(),
		"ca_fingerprint", ca.Fingerprint(), "enrollment", enroll.svc.Enabled())

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		return fmt.Errorf("fabricd: serve: %w", err)
	case <-kvs.Failed():
		// etcd runs inside this process; restarting it in place is not
		// safe, so exit non-zero for the supervisor to restart fabricd.
		return fmt.Errorf("fabricd: %w", kvs.Err())
	}
	logger.Info("shutting down")
	if sharder != nil {
		hctx, cancel := context.WithTimeout(context.Background(), cfg.Shard.HandoverTimeout+2*time.Second)
		sharder.Handover(hctx)
		cancel()
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		logger.Warn("in-flight requests did not finish in time", "err", err)
		srv.Close()
	}
	return nil
}

// ensureAdmin mints the first admin token on the first start, and warns when
// no admin token is live (all expired): a start never replaces one on its
// own; `fabricd admin-token` does, locally (see auth.Tokens.EnsureAdmin).
func ensureAdmin(ctx context.Context, tokens *auth.Tokens, cfg Config, logger *slog.Logger) error {
	created, err := tokens.EnsureAdmin(ctx, cfg.AdminTokenPath())
	if err != nil {
		return fmt.Errorf("fabricd: %w", err)
	}
	if created {
		logger.Info("first start: admin token written; use it as a bearer token", "path", cfg.AdminTokenPath())
		return nil
	}
	n, err := tokens.LiveAdmins(ctx)
	if err != nil {
		return fmt.Errorf("fabricd: %w", err)
	}
	if n == 0 {
		logger.Warn("no live admin token: mint one on this host with `fabricd admin-token` (docs/operations.md)",
			"data_dir", cfg.DataDir)
	}
	return nil
}

// stopPostgres stops the private cluster, waiting up to 30 s.
func stopPostgres(cluster *pgcluster.Cluster, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cluster.Stop(ctx); err != nil {
		logger.Error("private PostgreSQL did not stop cleanly", "err", err)
	}
}

// startPostgres starts the private cluster under dataDir. As root,
// PostgreSQL runs as the postgres user; when that user cannot reach dataDir
// (a 0700 home directory, say), the cluster lives in a directory of its own
// under /var/lib/multiplane, named after dataDir so restarts find it.
func startPostgres(ctx context.Context, dataDir string, logger *slog.Logger) (*pgcluster.Cluster, error) {
	dir := filepath.Join(dataDir, "postgresql")
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: dir, Logger: logger})
	if !errors.Is(err, pgcluster.ErrNotTraversable) {
		return cluster, err
	}
	abs, _ := filepath.Abs(dir)
	sum := sha256.Sum256([]byte(abs))
	alt := filepath.Join("/var/lib/multiplane", "postgresql-"+hex.EncodeToString(sum[:6]))
	logger.Warn("the postgres user cannot reach the data directory; keeping PostgreSQL data elsewhere",
		"data_dir", abs, "postgres_dir", alt, "reason", err)
	if err := os.MkdirAll(alt, 0o755); err != nil {
		return nil, err
	}
	return pgcluster.Start(ctx, pgcluster.Options{DataDir: alt, Logger: logger})
}

func loadTopology(ctx context.Context, inv *inventory.Inventory, path string, logger *slog.Logger) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("fabricd: topology: %w", err)
	}
	topo, err := planes.ParseTopology(data)
	if err != nil {
		return fmt.Errorf("fabricd: topology %s: %w", path, err)
	}
	rev, changed, err := inv.Replace(ctx, topo, "fabricd --topology")
	if err != nil {
		return fmt.Errorf("fabricd: %w", err)
	}
	logger.Info("topology loaded", "file", path, "revision", rev, "changed", changed,
		"planes", len(topo.Planes), "switches", len(topo.Switches), "endpoints", len(topo.Endpoints))
	return nil
}

func buildInfo() prometheus.Collector {
	v := version.Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "multiplane", Name: "build_info", Help: "Build of this fabricd; the value is 1.",
		ConstLabels: prometheus.Labels{"version": v.Short(), "goversion": v.GoVersion},
	})
	g.Set(1)
	return g
}

// readiness names the store that is not ready; /readyz shows the names,
// the log the errors.
func readiness(ctx context.Context, db *store.DB, kvs *kv.Store) error {
	var errs []error
	if err := db.Ready(ctx); err != nil {
		errs = append(errs, &api.NotReady{Component: "postgres", Err: err})
	}
	if err := kvs.Ready(ctx); err != nil {
		errs = append(errs, &api.NotReady{Component: "etcd", Err: err})
	}
	return errors.Join(errs...)
}
