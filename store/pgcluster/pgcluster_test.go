package pgcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
)

const helperEnv = "PGCLUSTER_TEST_HELPER_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		helperMain(dir)
		return
	}
	goleak.VerifyTestMain(m)
}

// helperMain starts a cluster, prints its postmaster pid and waits to be
// killed: the child process of TestParentDeathKillsPostgres.
func helperMain(dir string) {
	c, err := Start(context.Background(), Options{DataDir: dir, NoSync: true})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Println("PID", c.Pid())
	select {}
}

func requireBinaries(t *testing.T) {
	t.Helper()
	_, err := FindBinDir()
	testenv.Require(t, err == nil, fmt.Sprint(err))
}

// dataDir returns a fresh directory under the temp dir that (unlike
// t.TempDir, whose parent is mode 0700) the postgres user can reach when the
// test runs as root.
func dataDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "mp-pgc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func start(t *testing.T, opts Options) *Cluster {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testenv.Logger(t)
	}
	opts.NoSync = true
	c, err := Start(testenv.Context(t), opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return c
}

func exec1(t *testing.T, c *Cluster, sql string, args ...any) {
	t.Helper()
	ctx := testenv.Context(t)
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatalf("connect %s: %v", c.URL(), err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func queryInt(t *testing.T, c *Cluster, sql string) int {
	t.Helper()
	ctx := testenv.Context(t)
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatalf("connect %s: %v", c.URL(), err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// exited reports whether pid is gone (or a zombie nobody has reaped yet).
func exited(pid int) bool { return !processAlive(pid) }

func TestStartStopRestartKeepsData(t *testing.T) {
	requireBinaries(t)
	dir := dataDir(t)

	c := start(t, Options{DataDir: dir})
	if !strings.Contains(c.URL(), "/multiplane?") {
		t.Errorf("URL %q does not name database multiplane", c.URL())
	}
	exec1(t, c, "CREATE TABLE kept (v int)")
	exec1(t, c, "INSERT INTO kept VALUES (42)")
	pid := c.Pid()
	if err := c.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !exited(pid) {
		t.Fatalf("postmaster %d still running after Stop", pid)
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "postgres", "postmaster.pid")); !os.IsNotExist(err) {
		t.Errorf("postmaster.pid after clean stop: %v", err)
	}

	c2 := start(t, Options{DataDir: dir})
	if got := queryInt(t, c2, "SELECT v FROM kept"); got != 42 {
		t.Errorf("after restart: got %d, want 42", got)
	}
	if fi, err := os.Stat(c2.LogPath()); err != nil || fi.Size() == 0 {
		t.Errorf("log file %s: %v (empty?)", c2.LogPath(), err)
	}
}

func TestStalePidFile(t *testing.T) {
	requireBinaries(t)
	dir := dataDir(t)
	pidFile := filepath.Join(dir, "postgres", "postmaster.pid")

	// A run killed with SIGKILL leaves its postmaster.pid behind.
	c := start(t, Options{DataDir: dir})
	exec1(t, c, "CREATE TABLE kept (v int)")
	exec1(t, c, "INSERT INTO kept VALUES (7)")
	killedPid := c.Pid()
	if err := syscall.Kill(killedPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("Done not closed after the postmaster was killed")
	}
	if c.Err() == nil {
		t.Error("Err() = nil after SIGKILL")
	}
	testutil.WaitFor(t, 30*time.Second, "killed postmaster and its children to exit", func() bool {
		return exited(killedPid) && len(processesIn(filepath.Join(dir, "postgres"))) == 0
	})
	stale, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("expected a stale postmaster.pid: %v", err)
	}

	for _, tc := range []struct {
		name string
		pid  int // written into postmaster.pid
	}{
		{"dead pid", killedPid},
		{"pid reused by a live non-postgres process", os.Getpid()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := strings.SplitN(string(stale), "\n", 2)
			content := strconv.Itoa(tc.pid) + "\n" + lines[1]
			if err := os.WriteFile(pidFile, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			c := start(t, Options{DataDir: dir})
			if got := queryInt(t, c, "SELECT v FROM kept"); got != 7 {
				t.Errorf("got %d, want 7", got)
			}
			if err := c.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}

	t.Run("live postmaster", func(t *testing.T) {
		c := start(t, Options{DataDir: dir})
		_, err := Start(testenv.Context(t), Options{DataDir: dir, Logger: testenv.Logger(t)})
		if !errors.Is(err, ErrAlreadyRunning) {
			t.Fatalf("second Start on a running cluster: got %v, want ErrAlreadyRunning", err)
		}
		if !strings.Contains(err.Error(), strconv.Itoa(c.Pid())) {
			t.Errorf("error %q does not name pid %d", err, c.Pid())
		}
		if got := queryInt(t, c, "SELECT 1"); got != 1 {
			t.Error("running cluster disturbed")
		}
	})
}

// A postmaster.pid whose pid now names another cluster's live postgres
// (pids recycle where many clusters run, as under go test) is stale, and
// that postgres is left alone; one working in this cluster is running.
func TestStalePidOfAnotherClustersPostgres(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	c := &Cluster{pgData: dir, socketDir: dir, logger: testenv.Logger(t)}
	other, otherExited := sleepIn(t, elsewhere, true)
	pidFile := filepath.Join(dir, "postmaster.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(other.Process.Pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.clearStalePid(); err != nil {
		t.Fatalf("clearStalePid naming another cluster's postgres: %v, want it taken as stale", err)
	}
	if _, err := os.Stat(pidFile); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale postmaster.pid not removed: %v", err)
	}
	select {
	case err := <-otherExited:
		t.Fatalf("the other cluster's postgres exited: %v", err)
	default:
	}

	ours, _ := sleepIn(t, dir, true)
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(ours.Process.Pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var re *RunningError
	if err := c.clearStalePid(); !errors.As(err, &re) || re.Pid != ours.Process.Pid {
		t.Fatalf("clearStalePid naming a postgres in the cluster: %v, want a RunningError for pid %d", err, ours.Process.Pid)
	}
}

// sleepIn runs sleep in dir until the test ends, under postgres's name
// when asPostgres.
func sleepIn(t *testing.T, dir string, asPostgres bool) (*exec.Cmd, chan error) {
	t.Helper()
	name, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	if asPostgres {
		bin, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		name = filepath.Join(t.TempDir(), "postgres")
		if err := os.WriteFile(name, bin, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(name, "60")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return cmd, exited
}

// TestParentDeathKillsPostgres kills (SIGKILL) a process that started a
// cluster and checks that its postgres dies with it, and that the next
// Start on the same data succeeds despite the stale pid file.
func TestParentDeathKillsPostgres(t *testing.T) {
	requireBinaries(t)
	dir := dataDir(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	var pid int
	if _, err := fmt.Sscanf(line, "PID %d", &pid); err != nil {
		t.Fatalf("helper said %q", line)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	testutil.WaitFor(t, 30*time.Second, "postgres to die with its parent", func() bool {
		return exited(pid) && len(processesIn(filepath.Join(dir, "postgres"))) == 0
	})

	c := start(t, Options{DataDir: dir})
	if got := queryInt(t, c, "SELECT 1"); got != 1 {
		t.Error("restart after parent death failed")
	}
}

func TestStartErrors(t *testing.T) {
	requireBinaries(t)
	for _, tc := range []struct {
		name     string
		opts     func(t *testing.T) Options
		wantErr  error
		contains []string
	}{
		{
			name:     "no binaries",
			opts:     func(t *testing.T) Options { return Options{DataDir: dataDir(t), BinDir: t.TempDir()} },
			wantErr:  ErrNoBinaries,
			contains: []string{"postgresql"},
		},
		{
			name: "bad setting shows log tail",
			opts: func(t *testing.T) Options {
				return Options{DataDir: dataDir(t), Settings: map[string]string{"shared_buffers": "lots"}}
			},
			wantErr:  ErrStartup,
			contains: []string{"tail of", "shared_buffers"},
		},
		{
			name: "data of another major version",
			opts: func(t *testing.T) Options {
				d := dataDir(t)
				if err := os.MkdirAll(filepath.Join(d, "postgres"), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(d, "postgres", "PG_VERSION"), []byte("1\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				return Options{DataDir: d}
			},
			contains: []string{"initialised by PostgreSQL 1 ", "pg_upgrade"},
		},
		{
			name: "not a cluster",
			opts: func(t *testing.T) Options {
				d := dataDir(t)
				if err := os.MkdirAll(filepath.Join(d, "postgres", "junk"), 0o700); err != nil {
					t.Fatal(err)
				}
				return Options{DataDir: d}
			},
			contains: []string{"has no PG_VERSION", "remove it"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts(t)
			opts.Logger = testenv.Logger(t)
			opts.NoSync = true
			c, err := Start(testenv.Context(t), opts)
			if err == nil {
				c.Stop(context.Background())
				t.Fatal("Start succeeded")
			}
			t.Logf("error: %v", err)
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("got %v, want %v", err, tc.wantErr)
			}
			for _, s := range tc.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error does not mention %q", s)
				}
			}
		})
	}
}

func TestLongPathUsesShortSocketDir(t *testing.T) {
	requireBinaries(t)
	dir := dataDir(t)
	if err := os.Chmod(dir, 0o755); err != nil { // reachable when root
		t.Fatal(err)
	}
	long := filepath.Join(dir, strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(long, 0o755); err != nil {
		t.Fatal(err)
	}
	c := start(t, Options{DataDir: long})
	if strings.HasPrefix(c.SocketDir(), long) {
		t.Fatalf("socket dir %s is under the long data dir", c.SocketDir())
	}
	if len(c.SocketDir())+len(socketName()) > maxSocketPath {
		t.Fatalf("socket path %s too long", c.SocketDir())
	}
	t.Cleanup(func() { os.RemoveAll(c.SocketDir()) })
	if got := queryInt(t, c, "SELECT 1"); got != 1 {
		t.Error("query failed")
	}
	// The same data dir maps to the same socket dir after a restart.
	sock := c.SocketDir()
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	c2 := start(t, Options{DataDir: long})
	if c2.SocketDir() != sock {
		t.Errorf("socket dir changed across restart: %s then %s", sock, c2.SocketDir())
	}
	if err := c2.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("short socket dir %s left behind after Stop: %v", sock, err)
	}
}

// TestRootPaths runs as root for real: postgres runs as the postgres user,
// which must be able to reach the data directory.
func TestRootPaths(t *testing.T) {
	requireBinaries(t)
	testenv.RequireRoot(t)
	pgUser, err := runIdentity(defaultUser)
	testenv.Require(t, err == nil, fmt.Sprint(err))

	t.Run("parent not traversable", func(t *testing.T) {
		parent := dataDir(t)
		if err := os.Chmod(parent, 0o700); err != nil {
			t.Fatal(err)
		}
		_, err := Start(testenv.Context(t), Options{DataDir: filepath.Join(parent, "data"), Logger: testenv.Logger(t)})
		if !errors.Is(err, ErrNotTraversable) {
			t.Fatalf("got %v, want ErrNotTraversable", err)
		}
		t.Logf("error: %v", err)
		if want := "chmod o+x " + parent; !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q", want)
		}
		fi, err := os.Stat(parent)
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("parent mode changed: %v %v", fi.Mode(), err)
		}
	})

	t.Run("data dir 0700 is made traversable", func(t *testing.T) {
		dir := dataDir(t) // MkdirTemp: mode 0700, owned by root
		c := start(t, Options{DataDir: dir})
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o701 {
			t.Errorf("data dir mode %v, want 0701 (search bit only)", fi.Mode().Perm())
		}
		for _, d := range []string{filepath.Join(dir, "postgres"), c.SocketDir()} {
			fi, err := os.Stat(d)
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if st.Uid != pgUser.uid || fi.Mode().Perm() != 0o700 {
				t.Errorf("%s: uid %d mode %v, want uid %d mode 0700", d, st.Uid, fi.Mode().Perm(), pgUser.uid)
			}
		}
		if got := queryInt(t, c, "SELECT 1"); got != 1 {
			t.Error("query failed")
		}
		var user string
		conn, err := pgx.Connect(testenv.Context(t), c.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if err := conn.QueryRow(testenv.Context(t), "SELECT current_user").Scan(&user); err != nil || user != SuperUser {
			t.Errorf("current_user %q (%v), want %q", user, err, SuperUser)
		}
		if owner := procUID(t, c.Pid()); owner != pgUser.uid {
			t.Errorf("postmaster runs as uid %d, want %d", owner, pgUser.uid)
		}
	})

	t.Run("missing parents are created reachable", func(t *testing.T) {
		base := dataDir(t)
		if err := os.Chmod(base, 0o755); err != nil {
			t.Fatal(err)
		}
		c := start(t, Options{DataDir: filepath.Join(base, "a", "b", "data")})
		if got := queryInt(t, c, "SELECT 1"); got != 1 {
			t.Error("query failed")
		}
	})

	t.Run("no such user", func(t *testing.T) {
		_, err := Start(testenv.Context(t), Options{DataDir: dataDir(t), User: "mp-no-such-user", Logger: testenv.Logger(t)})
		if !errors.Is(err, ErrNoUser) {
			t.Fatalf("got %v, want ErrNoUser", err)
		}
	})
}

func procUID(t *testing.T, pid int) uint32 {
	t.Helper()
	fi, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Uid
}

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int // sign
	}{
		{"15", "9.6", 1},
		{"9.6", "10", -1},
		{"16", "16", 0},
		{"17", "15", 1},
	} {
		got := compareVersions(tc.a, tc.b)
		if (got > 0) != (tc.want > 0) || (got < 0) != (tc.want < 0) {
			t.Errorf("compareVersions(%q, %q) = %d, want sign %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestAsUnprivilegedUser runs, when root, the start/stop/restart test again
// as the postgres user, so the non-root path (no credential switch) is
// covered too.
func TestAsUnprivilegedUser(t *testing.T) {
	requireBinaries(t)
	testenv.RequireRoot(t)
	id, err := runIdentity(defaultUser)
	testenv.Require(t, err == nil, fmt.Sprint(err))

	// The test binary lives in a 0700 build directory: copy it where that
	// user can run it.
	dir := dataDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "pgcluster.test")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(testenv.Context(t), exe, "-test.run=^(TestStartStopRestartKeepsData|TestStalePidFile)$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TMPDIR="+os.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: id.uid, Gid: id.gid, Groups: id.groups},
	}
	out, err := cmd.CombinedOutput()
	t.Logf("as user %s:\n%s", id.name, out)
	if err != nil {
		t.Fatalf("as user %s: %v", id.name, err)
	}
	for _, name := range []string{"TestStartStopRestartKeepsData", "TestStalePidFile"} {
		if !strings.Contains(string(out), "--- PASS: "+name) {
			t.Errorf("%s did not pass as user %s", name, id.name)
		}
	}
}

// The backends of a killed postmaster that do not exit by themselves are
// killed after orphanGrace; other processes in the directory are left.
func TestStaleClusterKillsOrphans(t *testing.T) {
	dir := t.TempDir()
	c := &Cluster{pgData: dir, socketDir: dir, logger: testenv.Logger(t)}
	// A postmaster.pid whose process is gone: a pid that just exited.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "postmaster.pid"), []byte(strconv.Itoa(dead.Process.Pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A backend busy for a minute: sleep, under postgres's name.
	_, backendExited := sleepIn(t, dir, true)
	_, shellExited := sleepIn(t, dir, false) // not postgres: a user's process
	start := time.Now()
	if err := c.clearStalePid(); err != nil {
		t.Fatalf("clearStalePid with a busy orphan: %v", err)
	}
	el := time.Since(start)
	if el < orphanGrace || el > orphanGrace+3*time.Second {
		t.Fatalf("returned after %v, want just over the %v grace", el, orphanGrace)
	}
	select {
	case err := <-backendExited:
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("the orphan exited with %v, want killed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the orphaned backend still runs")
	}
	select {
	case err := <-shellExited:
		t.Fatalf("a process that is not postgres was stopped: %v", err)
	default:
	}
	if _, err := os.Stat(filepath.Join(dir, "postmaster.pid")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale postmaster.pid not removed: %v", err)
	}
}
