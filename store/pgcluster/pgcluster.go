// Package pgcluster runs a private PostgreSQL cluster from the machine's
// PostgreSQL binaries, for fabricd's no-setup default and for tests.
//
// Start initialises the cluster under <DataDir>/postgres on first use (a later
// Start reuses the data), runs postgres listening only on a unix socket with
// trust authentication, waits until it accepts connections and creates the
// database (default "multiplane"). URL returns a pgx connection URL for it;
// Stop shuts it down (fast shutdown, escalating if it hangs):
//
//	c, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: dir, Logger: logger})
//	if err != nil { ... }
//	defer c.Stop(context.Background())
//	db, err := store.Open(ctx, c.URL(), logger)
//
// Binaries: initdb and postgres are taken from PATH or else from the highest
// version under /usr/lib/postgresql/*/bin (Debian package "postgresql");
// ErrNoBinaries when there are none.
//
// Files under DataDir: postgres/ (the cluster), run/ (the socket directory)
// and postgres.log (output of initdb and postgres; its tail is part of the
// error when startup fails). The unix socket path must fit in 107 bytes; when
// DataDir is too deep for that, the socket directory is /tmp/mp-pg-<hash of
// DataDir> instead (logged at debug level; removed again by Stop).
//
// As root: PostgreSQL refuses to run as root, so initdb and postgres run as
// the "postgres" system user (Options.User), and the cluster and socket
// directories are owned by it. That user must be able to traverse every
// parent of DataDir: Start checks this up front and fails with
// ErrNotTraversable naming the directory and the fix (it never changes
// anything outside DataDir). DataDir itself is given the search (x) bit that
// user needs, and nothing more, and this is logged.
//
// Lifetime: postgres runs in its own process group and gets SIGKILL when the
// process that started it dies (PR_SET_PDEATHSIG, from an OS thread that is
// kept locked for the life of the child), so killing fabricd with -9 leaves
// no postgres behind. A postmaster.pid left by such a kill does not block the
// next Start; a live postmaster on the same data does (ErrAlreadyRunning).
//
// Supervision: Done is closed when the postmaster exits. Supervise (run in a
// goroutine) restarts it whenever it exits other than by Stop (a crash, an
// OOM kill, kill -9): at once the first time, with exponential backoff when
// it keeps failing; Restart does one restart. The data, settings and socket
// stay the same, so URL stays valid; a client pool only has to drop its dead
// connections. Collector exports multiplane_store_postgres_up and counts of
// exits and restarts.
package pgcluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
)

// Errors returned by Start; test with errors.Is.
var (
	// ErrNoBinaries: initdb and postgres were not found.
	ErrNoBinaries = errors.New("pgcluster: PostgreSQL server binaries (initdb, postgres) not found on PATH or under /usr/lib/postgresql/*/bin; install the Debian package `postgresql` (apt-get install postgresql)")
	// ErrNoUser: running as root and the system user to run postgres as does not exist.
	ErrNoUser = errors.New("pgcluster: no system user to run PostgreSQL as (it refuses to run as root)")
	// ErrNotTraversable: running as root and the postgres user cannot reach DataDir.
	ErrNotTraversable = errors.New("pgcluster: data directory not reachable by the PostgreSQL user")
	// ErrAlreadyRunning: a postgres is already running on the data directory.
	ErrAlreadyRunning = errors.New("pgcluster: PostgreSQL is already running on this data directory")
	// ErrStartup: postgres did not come up; the error carries the log tail.
	ErrStartup = errors.New("pgcluster: PostgreSQL failed to start")
)

// RunningError is the ErrAlreadyRunning of a live postmaster: its pid, and
// the URL of the database Start would have given, over that postmaster's
// socket, for a client that wants to use the running cluster instead.
type RunningError struct {
	Pid     int
	PidFile string
	URL     string
}

func (e *RunningError) Error() string {
	return fmt.Sprintf("%v: postmaster pid %d (from %s); stop it first", ErrAlreadyRunning, e.Pid, e.PidFile)
}

func (e *RunningError) Unwrap() error { return ErrAlreadyRunning }

const (
	// SuperUser is the cluster's bootstrap superuser, used in URL.
	SuperUser = "postgres"
	// Port is the port number in the socket file name; postgres listens on no TCP port.
	Port = 5432

	defaultDatabase     = "multiplane"
	defaultUser         = "postgres"
	defaultStartTimeout = 60 * time.Second
	defaultStopTimeout  = 30 * time.Second
	// maxSocketPath is the longest unix socket path (sun_path is 108 bytes
	// including the terminating NUL).
	maxSocketPath = 107
	logTailBytes  = 4096
)

// Options configure Start. Only DataDir is required.
type Options struct {
	// DataDir holds everything the cluster keeps; created if missing.
	DataDir string
	// Logger receives the cluster's own log lines (postgres writes to
	// <DataDir>/postgres.log). Nil discards.
	Logger *slog.Logger
	// Database is created if missing and named in URL; default "multiplane".
	Database string
	// BinDir, if set, is the directory holding initdb and postgres.
	BinDir string
	// User is the system user that runs postgres when the process is root;
	// default "postgres". Ignored when not root.
	User string
	// Settings are extra server settings, passed as -c name=value.
	Settings map[string]string
	// NoSync turns off flushing to disk (initdb --no-sync, fsync=off,
	// full_page_writes=off). For tests only: a machine crash can corrupt
	// the data (killing postgres cannot).
	NoSync bool
	// StartTimeout bounds initdb plus startup; default 60s.
	StartTimeout time.Duration
	// StopTimeout bounds the fast shutdown before Stop escalates; default 30s.
	StopTimeout time.Duration
}

// Cluster is a running private PostgreSQL.
type Cluster struct {
	logger    *slog.Logger
	dataDir   string // DataDir
	pgData    string // DataDir/postgres
	socketDir string
	logPath   string
	url       string
	stopWait  time.Duration

	// What a restart needs to start postgres the same way again.
	binDir string
	id     identity
	opts   Options

	opMu    sync.Mutex // serialises Restart and Stop
	procMu  sync.Mutex // proc; written under opMu as well
	proc    *child
	logFile *os.File

	// life ends when Stop begins: Supervise and Restart give up.
	life    context.Context
	endLife context.CancelFunc

	restarts, restartFailures, unexpectedExits atomic.Int64

	stopOnce sync.Once
	stopErr  error
}

// URL returns a pgx connection URL for the cluster's database over its unix socket.
func (c *Cluster) URL() string { return c.url }

// DataDir returns the data directory given in Options (absolute).
func (c *Cluster) DataDir() string { return c.dataDir }

// SocketDir returns the directory holding the unix socket.
func (c *Cluster) SocketDir() string { return c.socketDir }

// LogPath returns the path of the postgres log file.
func (c *Cluster) LogPath() string { return c.logPath }

func (c *Cluster) current() *child {
	c.procMu.Lock()
	defer c.procMu.Unlock()
	return c.proc
}

// Pid returns the postmaster's process id (the new one after a Restart).
func (c *Cluster) Pid() int { return c.current().cmd.Process.Pid }

// Done is closed when the current postmaster has exited, whether by Stop
// or not; Supervise watches it. After a Restart, Done is a new channel.
func (c *Cluster) Done() <-chan struct{} { return c.current().done }

// Err returns how the current postmaster exited (nil for a clean exit),
// once Done is closed; nil before.
func (c *Cluster) Err() error {
	p := c.current()
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// identity is who runs initdb and postgres.
type identity struct {
	name    string
	uid     uint32
	gid     uint32
	groups  []uint32 // supplementary, including gid
	setCred bool     // run with Credential (we are root)
}

// Start starts (and on first use initialises) the cluster described by opts
// and returns once it accepts connections and the database exists. ctx
// bounds the startup only; the cluster runs until Stop (or until this
// process dies).
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.DataDir == "" {
		return nil, errors.New("pgcluster: Options.DataDir is required")
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "pgcluster")
	if opts.Database == "" {
		opts.Database = defaultDatabase
	}
	if opts.User == "" {
		opts.User = defaultUser
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = defaultStartTimeout
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = defaultStopTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	dataDir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: data directory: %w", err)
	}
	id, err := runIdentity(opts.User)
	if err != nil {
		return nil, err
	}
	// Missing parents are created like mkdir -p (0755 before umask), so that
	// the postgres user can reach what we create; DataDir itself is 0700.
	if err := os.MkdirAll(filepath.Dir(dataDir), 0o755); err != nil {
		return nil, fmt.Errorf("pgcluster: create data directory: %w", err)
	}
	if err := os.Mkdir(dataDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("pgcluster: create data directory: %w", err)
	}
	if dataDir, err = filepath.EvalSymlinks(dataDir); err != nil {
		return nil, fmt.Errorf("pgcluster: data directory: %w", err)
	}
	if id.setCred {
		if err := ensureTraversable(dataDir, id, logger); err != nil {
			return nil, err
		}
	}

	c := &Cluster{
		logger:   logger,
		dataDir:  dataDir,
		pgData:   filepath.Join(dataDir, "postgres"),
		logPath:  filepath.Join(dataDir, "postgres.log"),
		stopWait: opts.StopTimeout,
		id:       id,
		opts:     opts,
	}
	c.life, c.endLife = context.WithCancel(context.Background())

	dataVersion, err := readPGVersion(c.pgData)
	if err != nil {
		return nil, err
	}
	binDir, err := findBinDir(opts.BinDir, dataVersion)
	if err != nil {
		return nil, err
	}
	c.binDir = binDir
	logger.Debug("using PostgreSQL binaries", "bin_dir", binDir)

	c.logFile, err = os.OpenFile(c.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: open log file: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			c.logFile.Close()
		}
	}()

	if dataVersion == "" {
		if err := c.initdb(ctx, binDir, id, opts.NoSync); err != nil {
			return nil, err
		}
	} else if id.setCred {
		if err := checkOwner(c.pgData, id); err != nil {
			return nil, err
		}
	}

	if c.socketDir, err = c.prepareSocketDir(id); err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Set("host", c.socketDir)
	q.Set("port", strconv.Itoa(Port))
	q.Set("sslmode", "disable")
	c.url = (&url.URL{
		Scheme:   "postgres",
		User:     url.User(SuperUser),
		Path:     "/" + opts.Database,
		RawQuery: q.Encode(),
	}).String()
	if err := c.clearStalePid(); err != nil {
		return nil, err
	}

	if err := c.startPostgres(); err != nil {
		return nil, err
	}

	if err := c.waitReady(ctx); err != nil {
		c.kill()
		return nil, err
	}
	if err := c.createDatabase(ctx, opts.Database); err != nil {
		c.Stop(context.Background())
		return nil, err
	}
	ok = true
	logger.Info("PostgreSQL started", "data_dir", c.pgData, "socket_dir", c.socketDir, "pid", c.proc.cmd.Process.Pid, "database", opts.Database)
	return c, nil
}

// Stop shuts the cluster down: SIGINT (fast shutdown: active sessions are
// cancelled, data is checkpointed) and a wait for the postmaster to exit.
// If it has not exited after Options.StopTimeout or when ctx is done, Stop
// escalates to SIGQUIT (immediate shutdown) and then SIGKILL (the server's
// own children exit when they see the postmaster gone). Stop is safe to call
// more than once, and returns nil if postgres had already exited (see Done
// and Err).
func (c *Cluster) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() {
		c.endLife() // a Restart in progress gives up, and releases opMu
		c.opMu.Lock()
		defer c.opMu.Unlock()
		c.stopErr = c.stop(ctx)
		c.logFile.Close()
		if !strings.HasPrefix(c.socketDir, c.dataDir+"/") {
			_ = os.Remove(c.socketDir) // the short one under /tmp, if empty
		}
	})
	return c.stopErr
}

func (c *Cluster) stop(ctx context.Context) error {
	p := c.proc
	select {
	case <-p.done:
		c.logger.Warn("PostgreSQL had already exited", "err", p.err)
		return nil
	default:
	}
	pid := p.cmd.Process.Pid
	c.logger.Debug("stopping PostgreSQL", "pid", pid)
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	t := time.NewTimer(c.stopWait)
	defer t.Stop()
	select {
	case <-p.done:
		c.logger.Info("PostgreSQL stopped", "pid", pid)
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	c.logger.Warn("PostgreSQL did not stop in time; sending SIGQUIT", "pid", pid)
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	t.Reset(5 * time.Second)
	select {
	case <-p.done:
		return fmt.Errorf("pgcluster: PostgreSQL did not complete a fast shutdown; stopped with SIGQUIT")
	case <-t.C:
	}
	c.kill()
	return fmt.Errorf("pgcluster: PostgreSQL did not stop; killed with SIGKILL")
}

// ErrStopped: Restart after Stop.
var ErrStopped = errors.New("pgcluster: cluster stopped")

// Restart starts the postmaster again, on the same data, settings and
// socket (so the URL stays valid), after it exited on its own: a crash, an
// OOM kill, kill -9. It waits for the old server's processes to go (as
// Start does for a stale postmaster.pid), and returns once the new one
// accepts connections. It does nothing while the postmaster runs, and
// fails with ErrStopped once Stop has begun (Stop interrupts it).
func (c *Cluster) Restart(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	defer context.AfterFunc(c.life, cancel)()
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if c.life.Err() != nil {
		return ErrStopped
	}
	select {
	case <-c.proc.done:
	default:
		return nil
	}
	if err := c.clearStalePid(); err != nil {
		return err
	}
	if err := c.startPostgres(); err != nil {
		return err
	}
	if err := c.waitReady(ctx); err != nil {
		c.kill()
		if c.life.Err() != nil {
			return ErrStopped
		}
		return err
	}
	return nil
}

// Supervision configures Supervise; the zero value is usable.
type Supervision struct {
	// MinBackoff is the wait before a restart when the server ran for less
	// than StableAfter since the last one (the first restart after a stable
	// run is immediate); doubled on every further failure up to MaxBackoff.
	// Defaults 500ms, 30s and 60s.
	MinBackoff, MaxBackoff, StableAfter time.Duration
	// OnRestart, if set, is called after each successful restart (fabricd
	// drops its pool's dead connections there).
	OnRestart func()
}

// Supervise keeps the postmaster running until ctx ends or Stop is called:
// whenever it exits on its own it is restarted (Restart), immediately the
// first time and with exponential backoff while it keeps failing or dying
// soon after a restart. Every exit and restart is logged and counted (see
// Collector). Supervise blocks; run it in a goroutine.
func (c *Cluster) Supervise(ctx context.Context, s Supervision) {
	if s.MinBackoff <= 0 {
		s.MinBackoff = 500 * time.Millisecond
	}
	if s.MaxBackoff <= 0 {
		s.MaxBackoff = 30 * time.Second
	}
	if s.StableAfter <= 0 {
		s.StableAfter = time.Minute
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.life, cancel)()
	var backoff time.Duration
	var lastStart time.Time // the first exit is restarted at once
	for {
		p := c.current()
		select {
		case <-ctx.Done():
			return
		case <-p.done:
		}
		if ctx.Err() != nil {
			return // stopping: the exit was ours
		}
		c.unexpectedExits.Add(1)
		c.logger.Error("PostgreSQL exited unexpectedly; restarting it", "pid", p.cmd.Process.Pid, "err", p.err, "log", c.logPath)
		if lastStart.IsZero() || time.Since(lastStart) >= s.StableAfter {
			backoff = 0
		} else {
			backoff = min(max(2*backoff, s.MinBackoff), s.MaxBackoff)
		}
		for attempt := 1; ; attempt++ {
			if backoff > 0 {
				c.logger.Warn("waiting before restarting PostgreSQL", "backoff", backoff, "attempt", attempt)
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
			}
			start := time.Now()
			err := c.Restart(ctx)
			if err == nil {
				c.restarts.Add(1)
				lastStart = time.Now()
				c.logger.Info("PostgreSQL restarted", "pid", c.Pid(), "attempt", attempt,
					"took", time.Since(start).Round(time.Millisecond))
				if s.OnRestart != nil {
					s.OnRestart()
				}
				break
			}
			if ctx.Err() != nil || errors.Is(err, ErrStopped) {
				return
			}
			c.restartFailures.Add(1)
			backoff = min(max(2*backoff, s.MinBackoff), s.MaxBackoff)
			c.logger.Error("PostgreSQL restart failed", "attempt", attempt, "err", err)
		}
	}
}

// Collector returns a Prometheus collector of the cluster's supervision:
// multiplane_store_postgres_up (1 while the postmaster runs),
// multiplane_store_postgres_exits_total (exits not caused by Stop),
// multiplane_store_postgres_restarts_total and
// multiplane_store_postgres_restart_failures_total.
func (c *Cluster) Collector() prometheus.Collector { return clusterCollector{c} }

var (
	descUp              = prometheus.NewDesc("multiplane_store_postgres_up", "1 while the private PostgreSQL's postmaster runs, else 0.", nil, nil)
	descExits           = prometheus.NewDesc("multiplane_store_postgres_exits_total", "Exits of the private PostgreSQL not caused by fabricd stopping it.", nil, nil)
	descRestarts        = prometheus.NewDesc("multiplane_store_postgres_restarts_total", "Successful restarts of the private PostgreSQL after it exited.", nil, nil)
	descRestartFailures = prometheus.NewDesc("multiplane_store_postgres_restart_failures_total", "Failed attempts to restart the private PostgreSQL.", nil, nil)
)

type clusterCollector struct{ c *Cluster }

func (cc clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descUp
	ch <- descExits
	ch <- descRestarts
	ch <- descRestartFailures
}

func (cc clusterCollector) Collect(ch chan<- prometheus.Metric) {
	up := 1.0
	select {
	case <-cc.c.Done():
		up = 0
	default:
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(descExits, prometheus.CounterValue, float64(cc.c.unexpectedExits.Load()))
	ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(cc.c.restarts.Load()))
	ch <- prometheus.MustNewConstMetric(descRestartFailures, prometheus.CounterValue, float64(cc.c.restartFailures.Load()))
}

// kill sends SIGKILL to the postmaster's process group and waits (bounded)
// for the postmaster to be reaped. Backends put themselves in their own
// sessions and exit on their own once the postmaster is gone.
func (c *Cluster) kill() {
	p := c.proc
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		c.logger.Error("PostgreSQL did not exit after SIGKILL", "pid", p.cmd.Process.Pid)
	}
}

// runIdentity decides who runs postgres: the current user, or when root the
// named system user.
func runIdentity(name string) (identity, error) {
	if os.Geteuid() != 0 {
		return identity{uid: uint32(os.Geteuid()), gid: uint32(os.Getegid())}, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return identity{}, fmt.Errorf("%w: running as root and user %q: %v; install the Debian package `postgresql` (it creates the user), create the user (useradd --system %s), or run as a non-root user", ErrNoUser, name, err, name)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return identity{}, fmt.Errorf("%w: user %q has a non-numeric uid/gid", ErrNoUser, name)
	}
	if uid == 0 {
		return identity{}, fmt.Errorf("%w: user %q has uid 0", ErrNoUser, name)
	}
	id := identity{name: name, uid: uint32(uid), gid: uint32(gid), setCred: true}
	gids, err := u.GroupIds()
	if err != nil {
		gids = []string{u.Gid}
	}
	for _, g := range gids {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil {
			id.groups = append(id.groups, uint32(n))
		}
	}
	if !slices.Contains(id.groups, id.gid) {
		id.groups = append(id.groups, id.gid)
	}
	return id, nil
}

// searchClass returns the permission bit (0o100, 0o010 or 0o001) that
// decides whether id may search a directory with this owner and group.
func searchClass(st *syscall.Stat_t, id identity) fs.FileMode {
	switch {
	case st.Uid == id.uid:
		return 0o100
	case slices.Contains(id.groups, st.Gid):
		return 0o010
	default:
		return 0o001
	}
}

// ensureTraversable checks that id can reach dataDir through every parent,
// and gives dataDir itself the search bit id needs. Parents are never changed.
func ensureTraversable(dataDir string, id identity, logger *slog.Logger) error {
	var parents []string
	for d := filepath.Dir(dataDir); ; d = filepath.Dir(d) {
		parents = append(parents, d)
		if d == "/" || d == "." {
			break
		}
	}
	slices.Reverse(parents)
	for _, d := range parents {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		bit := searchClass(st, id)
		if fi.Mode().Perm()&bit != 0 {
			continue
		}
		who := map[fs.FileMode]string{0o100: "u", 0o010: "g", 0o001: "o"}[bit]
		return fmt.Errorf("%w: PostgreSQL refuses to run as root, so it runs as user %q (uid %d), "+
			"which cannot traverse %s (mode %s, owner uid %d, gid %d) to reach %s; "+
			"use a data directory that user can reach (for example under /var/lib), "+
			"or allow traversal with `chmod %s+x %s`",
			ErrNotTraversable, id.name, id.uid, d, fi.Mode().Perm(), st.Uid, st.Gid, dataDir, who, d)
	}
	fi, err := os.Stat(dataDir)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	bit := searchClass(fi.Sys().(*syscall.Stat_t), id)
	if fi.Mode().Perm()&bit == 0 {
		mode := fi.Mode().Perm() | bit
		if err := os.Chmod(dataDir, mode); err != nil {
			return fmt.Errorf("pgcluster: grant user %q search permission on the data directory: %w", id.name, err)
		}
		logger.Info("granted the PostgreSQL user search (x) permission on the data directory",
			"path", dataDir, "user", id.name, "mode_before", fi.Mode().Perm(), "mode_after", mode)
	}
	return nil
}

// checkOwner checks that an existing cluster directory belongs to id.
func checkOwner(pgData string, id identity) error {
	fi, err := os.Stat(pgData)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != id.uid {
		return fmt.Errorf("pgcluster: %s is owned by uid %d, but PostgreSQL runs as user %q (uid %d); fix with `chown -R %s: %s`",
			pgData, st.Uid, id.name, id.uid, id.name, pgData)
	}
	return nil
}

// readPGVersion returns the major version in pgData/PG_VERSION, or "" if the
// cluster has not been initialised. A non-empty directory without
// PG_VERSION is an error: it is not a cluster, and is left alone.
func readPGVersion(pgData string) (string, error) {
	b, err := os.ReadFile(filepath.Join(pgData, "PG_VERSION"))
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("pgcluster: %w", err)
	}
	entries, err := os.ReadDir(pgData)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("pgcluster: %w", err)
	}
	if len(entries) > 0 {
		return "", fmt.Errorf("pgcluster: %s is not empty but has no PG_VERSION (an interrupted initdb?); remove it to initialise a new cluster", pgData)
	}
	return "", nil
}

// FindBinDir returns the directory holding initdb and postgres: the one on
// PATH, or else the highest version under /usr/lib/postgresql/*/bin.
// The error wraps ErrNoBinaries.
func FindBinDir() (string, error) { return findBinDir("", "") }

func findBinDir(explicit, dataVersion string) (string, error) {
	if explicit != "" {
		if !hasServerBinaries(explicit) {
			return "", fmt.Errorf("%w (Options.BinDir %s has no initdb and postgres)", ErrNoBinaries, explicit)
		}
		return explicit, checkBinVersion(explicit, dataVersion)
	}
	// Data initialised by a given major version needs that version's binaries.
	if dataVersion != "" {
		if d := filepath.Join("/usr/lib/postgresql", dataVersion, "bin"); hasServerBinaries(d) {
			return d, nil
		}
	}
	var candidates []string
	for _, name := range []string{"initdb", "postgres"} {
		if p, err := exec.LookPath(name); err == nil {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				candidates = append(candidates, filepath.Dir(r))
			}
			candidates = append(candidates, filepath.Dir(p))
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(matches, func(a, b string) int { // highest version first
		return compareVersions(filepath.Base(filepath.Dir(b)), filepath.Base(filepath.Dir(a)))
	})
	candidates = append(candidates, matches...)
	for _, d := range candidates {
		if hasServerBinaries(d) {
			return d, checkBinVersion(d, dataVersion)
		}
	}
	return "", ErrNoBinaries
}

func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// compareVersions compares dotted numeric versions ("15", "9.6").
func compareVersions(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(pa), len(pb)); i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

// checkBinVersion checks that the binaries in dir can run a cluster
// initialised by major version dataVersion ("" = not initialised yet).
func checkBinVersion(dir, dataVersion string) error {
	if dataVersion == "" {
		return nil
	}
	out, err := exec.Command(filepath.Join(dir, "postgres"), "--version").Output()
	if err != nil {
		return fmt.Errorf("pgcluster: %s --version: %w", filepath.Join(dir, "postgres"), err)
	}
	// "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
	fields := strings.Fields(string(out))
	if len(fields) < 3 {
		return fmt.Errorf("pgcluster: unexpected postgres --version output %q", out)
	}
	v := fields[2] // "15.18", "9.6.24", "17beta1"
	rest, found := strings.CutPrefix(v, dataVersion)
	if !found || (rest != "" && rest[0] >= '0' && rest[0] <= '9') {
		return fmt.Errorf("pgcluster: the cluster was initialised by PostgreSQL %s but the binaries in %s are version %s; install PostgreSQL %s (or upgrade the cluster with pg_upgrade)",
			dataVersion, dir, v, dataVersion)
	}
	return nil
}

// initdb creates the cluster.
func (c *Cluster) initdb(ctx context.Context, binDir string, id identity, noSync bool) error {
	if err := os.MkdirAll(c.pgData, 0o700); err != nil {
		return fmt.Errorf("pgcluster: create cluster directory: %w", err)
	}
	if id.setCred {
		if err := os.Chown(c.pgData, int(id.uid), int(id.gid)); err != nil {
			return fmt.Errorf("pgcluster: chown cluster directory: %w", err)
		}
	}
	args := []string{
		"-D", c.pgData,
		"--username=" + SuperUser,
		"--auth-local=trust",
		"--auth-host=reject",
		"--encoding=UTF8",
		"--locale=C",
	}
	if noSync {
		args = append(args, "--no-sync")
	}
	c.logger.Info("initialising PostgreSQL cluster", "data_dir", c.pgData)
	start := time.Now()
	cmd := c.command(filepath.Join(binDir, "initdb"), args, id, c.dataDir)
	p, err := startChild(cmd)
	if err != nil {
		return fmt.Errorf("pgcluster: run initdb: %w", err)
	}
	// The directory was empty before: on failure, leave it so again, so that
	// the next Start initialises afresh.
	cleanup := func() {
		if err := os.RemoveAll(c.pgData); err != nil {
			c.logger.Warn("could not remove the cluster directory after a failed initdb", "path", c.pgData, "err", err)
		}
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-p.done
		cleanup()
		return fmt.Errorf("pgcluster: initdb: %w%s", ctx.Err(), c.logTail())
	}
	if p.err != nil {
		cleanup()
		return fmt.Errorf("pgcluster: initdb failed: %w%s", p.err, c.logTail())
	}
	c.logger.Debug("initdb done", "duration", time.Since(start))
	return nil
}

// prepareSocketDir creates the socket directory, owned by id and mode 0700:
// DataDir/run, or a short directory under /tmp when that path would be too
// long for a unix socket.
func (c *Cluster) prepareSocketDir(id identity) (string, error) {
	dir := filepath.Join(c.dataDir, "run")
	if len(dir)+len(socketName()) > maxSocketPath {
		sum := sha256.Sum256([]byte(c.dataDir))
		short := filepath.Join(os.TempDir(), "mp-pg-"+hex.EncodeToString(sum[:6]))
		c.logger.Debug("socket path under the data directory is too long; using a directory under the temp dir",
			"wanted", filepath.Join(dir, socketName()), "limit", maxSocketPath, "socket_dir", short)
		dir = short
		if len(dir)+len(socketName()) > maxSocketPath {
			return "", fmt.Errorf("pgcluster: socket directory %s is too long for a unix socket; set TMPDIR to a shorter path", dir)
		}
	}
	err := os.Mkdir(dir, 0o700)
	created := err == nil
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("pgcluster: create socket directory: %w", err)
	}
	if created && id.setCred {
		if err := os.Chown(dir, int(id.uid), int(id.gid)); err != nil {
			return "", fmt.Errorf("pgcluster: chown socket directory: %w", err)
		}
	}
	// An existing directory (possibly in world-writable /tmp) must be a real
	// directory that only the postgres user can use.
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("pgcluster: socket directory: %w", err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || st.Uid != id.uid || fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("pgcluster: socket directory %s must be a directory owned by uid %d with mode 0700 (it is %s, owner uid %d); remove it and retry",
			dir, id.uid, fi.Mode(), st.Uid)
	}
	return dir, nil
}

func socketName() string { return "/.s.PGSQL." + strconv.Itoa(Port) }

// A killed postmaster's backends exit by themselves once they notice it
// is gone, but a backend busy in a long query may not for minutes, and
// PostgreSQL refuses to start while they hold its shared memory. Start
// gives them orphanGrace, then kills them and waits up to orphanWait.
const (
	orphanGrace = time.Second
	orphanWait  = 5 * time.Second
)

// clearStalePid handles a postmaster.pid left behind by a postgres that was
// killed. If its process is alive and a postgres working in this cluster
// (not another cluster's, which a recycled pid can name where many run,
// as under go test), the cluster is running:
// a *RunningError. Otherwise the dead postmaster's orphaned backends are
// given orphanGrace to exit and then killed, and the stale lock files are
// removed, so that a recycled pid cannot make postgres refuse to start.
func (c *Cluster) clearStalePid() error {
	pidFile := filepath.Join(c.pgData, "postmaster.pid")
	b, err := os.ReadFile(pidFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if pid > 0 && processAlive(pid) && isPostgres(pid) && runsIn(pid, c.pgData) {
		return &RunningError{Pid: pid, PidFile: pidFile, URL: c.url}
	}
	orphans := c.orphans()
	for deadline := time.Now().Add(orphanGrace); len(orphans) > 0 && time.Now().Before(deadline); orphans = c.orphans() {
		time.Sleep(50 * time.Millisecond)
	}
	if len(orphans) > 0 {
		c.logger.Warn("killing the backends of a dead postmaster", "postmaster", pid, "pids", orphans)
		for _, o := range orphans {
			_ = syscall.Kill(o, syscall.SIGKILL)
		}
	}
	for deadline := time.Now().Add(orphanWait); len(orphans) > 0 && time.Now().Before(deadline); orphans = c.orphans() {
		time.Sleep(50 * time.Millisecond)
	}
	if len(orphans) > 0 {
		return fmt.Errorf("%w: postmaster pid %d is gone but its processes %v still run in %s after SIGKILL and %v", ErrAlreadyRunning, pid, orphans, c.pgData, orphanWait)
	}
	c.logger.Info("removing stale postmaster.pid", "path", pidFile, "pid", pid)
	if err := os.Remove(pidFile); err != nil {
		return fmt.Errorf("pgcluster: remove stale pid file: %w", err)
	}
	if err := os.Remove(filepath.Join(c.socketDir, socketName()[1:]+".lock")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pgcluster: remove stale socket lock file: %w", err)
	}
	return nil
}

// processAlive reports whether pid is a running process (a zombie, dead but
// not yet reaped by its parent, does not count).
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

// runsIn reports whether pid works in dir, as every postgres process
// works in its cluster directory; when it cannot tell, it says yes.
func runsIn(pid int, dir string) bool {
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	if cwd == dir {
		return true
	}
	resolved, err := filepath.EvalSymlinks(dir)
	return err != nil || cwd == resolved
}

func isPostgres(pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return true // cannot tell: assume the worst
	}
	name := strings.TrimSpace(string(comm))
	return strings.HasPrefix(name, "postgres") || strings.HasPrefix(name, "postmaster")
}

// orphans returns the postgres processes working in the cluster directory
// and owned by its owner: with the postmaster dead, orphaned backends.
// Other processes there (a shell, say) are not postgres's and are left.
func (c *Cluster) orphans() []int {
	fi, err := os.Stat(c.pgData)
	if err != nil {
		return nil
	}
	owner := fi.Sys().(*syscall.Stat_t).Uid
	var pids []int
	for _, pid := range processesIn(c.pgData) {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		name := strings.TrimSpace(string(comm))
		pfi, perr := os.Stat(fmt.Sprintf("/proc/%d", pid))
		if err != nil || perr != nil || pfi.Sys().(*syscall.Stat_t).Uid != owner {
			continue
		}
		if strings.HasPrefix(name, "postgres") || strings.HasPrefix(name, "postmaster") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processesIn returns the pids of processes whose working directory is dir
// (every postgres process works in its cluster directory). Processes we may
// not inspect are skipped.
func processesIn(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err == nil && cwd == dir {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (c *Cluster) startPostgres() error {
	binDir, id, opts := c.binDir, c.id, c.opts
	settings := map[string]string{
		"listen_addresses":        "",
		"unix_socket_directories": c.socketDir,
		"unix_socket_permissions": "0700",
		"port":                    strconv.Itoa(Port),
		"logging_collector":       "off",
	}
	if opts.NoSync {
		// Not synchronous_commit=off: that loses commits when postgres
		// itself is killed, not only when the machine crashes.
		settings["fsync"] = "off"
		settings["full_page_writes"] = "off"
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	args := []string{"-D", c.pgData}
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		args = append(args, "-c", k+"="+settings[k])
	}
	cmd := c.command(filepath.Join(binDir, "postgres"), args, id, c.pgData)
	p, err := startChild(cmd)
	if err != nil {
		return fmt.Errorf("pgcluster: run postgres: %w", err)
	}
	c.procMu.Lock()
	c.proc = p
	c.procMu.Unlock()
	c.logger.Debug("postgres started", "pid", cmd.Process.Pid)
	return nil
}

// command builds a child command: output to the log file, its own process
// group, SIGKILL when we die, and id's credentials when we are root.
func (c *Cluster) command(path string, args []string, id identity, dir string) *exec.Cmd {
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Stdout = c.logFile
	cmd.Stderr = c.logFile
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group: a terminal's Ctrl-C reaches only us, and we
		// stop postgres in order (after whatever still needs the database).
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
	}
	if id.setCred {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: id.uid, Gid: id.gid, Groups: id.groups}
	}
	return cmd
}

// childEnv is our environment without libpq's PG* variables (which would
// point the tools elsewhere), in the C locale.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

// child is a process started from an OS thread that stays locked until the
// process exits. PR_SET_PDEATHSIG fires when the *thread* that forked the
// child exits, not the process; Go may retire threads, so the starting
// thread is held for the child's whole life.
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and been reaped
	err  error         // exit error, valid after done
}

func startChild(cmd *exec.Cmd) (*child, error) {
	p := &child{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			runtime.UnlockOSThread()
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		runtime.UnlockOSThread()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// waitReady polls until postgres accepts connections, it exits, or ctx ends.
func (c *Cluster) waitReady(ctx context.Context) error {
	cfg, err := pgx.ParseConfig(c.adminURL())
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.ConnectConfig(attemptCtx, cfg)
		cancel()
		if err == nil {
			return conn.Close(ctx)
		}
		lastErr = err
		select {
		case <-c.proc.done:
			return fmt.Errorf("%w: postgres exited: %v%s", ErrStartup, c.proc.err, c.logTail())
		case <-ctx.Done():
			return fmt.Errorf("%w: not accepting connections: %v (%v)%s", ErrStartup, ctx.Err(), lastErr, c.logTail())
		case <-tick.C:
		}
	}
}

// adminURL is the URL of the "postgres" maintenance database.
func (c *Cluster) adminURL() string {
	u, _ := url.Parse(c.url)
	u.Path = "/postgres"
	return u.String()
}

func (c *Cluster) createDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.adminURL())
	if err != nil {
		return fmt.Errorf("pgcluster: connect: %w", err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("pgcluster: look up database: %w", err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database
		err = nil
	}
	if err != nil {
		return fmt.Errorf("pgcluster: create database %q: %w", name, err)
	}
	c.logger.Info("created database", "database", name)
	return nil
}

// logTail returns the end of the postgres log, formatted to append to an error.
func (c *Cluster) logTail() string {
	f, err := os.Open(c.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-logTailBytes, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	if err != nil || len(b) == 0 {
		return ""
	}
	if off > 0 {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return fmt.Sprintf("\n--- tail of %s ---\n%s", c.logPath, strings.TrimRight(string(b), "\n"))
}
