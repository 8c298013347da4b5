package pgcluster

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
)

// TestSuperviseRestartsKilledPostmaster kills the postmaster with SIGKILL,
// twice: Supervise brings it back on the same URL with the data, counts
// the restarts, and returns once the cluster is stopped.
func TestSuperviseRestartsKilledPostmaster(t *testing.T) {
	requireBinaries(t)
	c := start(t, Options{DataDir: dataDir(t)})
	exec1(t, c, "CREATE TABLE kept (v int)")
	exec1(t, c, "INSERT INTO kept VALUES (42)")

	var onRestart atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Supervise(context.Background(), Supervision{MinBackoff: 10 * time.Millisecond, OnRestart: func() { onRestart.Add(1) }})
	}()
	for i := range 2 {
		old := c.Pid()
		killed := time.Now()
		if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 30*time.Second, "a new postmaster", func() bool {
			return onRestart.Load() == int64(i+1) && c.Pid() != old && c.Err() == nil && connects(c)
		})
		t.Logf("kill %d: accepting connections again after %v", i+1, time.Since(killed).Round(time.Millisecond))
		if got := queryInt(t, c, "SELECT v FROM kept"); got != 42 {
			t.Fatalf("after restart kept = %d, want 42", got)
		}
	}
	if n := c.restarts.Load(); n != 2 {
		t.Errorf("restarts = %d, want 2", n)
	}
	if n := c.unexpectedExits.Load(); n != 2 {
		t.Errorf("unexpected exits = %d, want 2", n)
	}

	if err := c.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Supervise still running 10s after Stop")
	}
	if n := c.restarts.Load(); n != 2 {
		t.Errorf("Stop counted as a restart: restarts = %d", n)
	}
	if err := c.Restart(context.Background()); !errors.Is(err, ErrStopped) {
		t.Errorf("Restart after Stop = %v, want ErrStopped", err)
	}
}

// A backend busy in a query does not notice its postmaster's death; the
// restart kills it rather than waiting for it, and is back within 10 s.
func TestSuperviseRecoversWithBusyBackend(t *testing.T) {
	requireBinaries(t)
	c := start(t, Options{DataDir: dataDir(t)})
	ctx := testenv.Context(t)
	busy, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close(context.Background())
	go busy.Exec(ctx, "SELECT count(*) FROM generate_series(1, 100000000000)")
	testutil.WaitFor(t, 10*time.Second, "the busy query", func() bool {
		return queryInt(t, c, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT count(*) FROM generate_series%' AND state = 'active'") == 1
	})
	go c.Supervise(ctx, Supervision{MinBackoff: 10 * time.Millisecond})
	old := c.Pid()
	killed := time.Now()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "a new postmaster beside the busy backend", func() bool {
		return c.Pid() != old && c.Err() == nil && connects(c)
	})
	t.Logf("accepting connections again %v after kill -9", time.Since(killed).Round(time.Millisecond))
}

// TestRestartWhileRunningDoesNothing: Restart of a live postmaster keeps it.
func TestRestartWhileRunningDoesNothing(t *testing.T) {
	requireBinaries(t)
	c := start(t, Options{DataDir: dataDir(t)})
	pid := c.Pid()
	if err := c.Restart(testenv.Context(t)); err != nil {
		t.Fatal(err)
	}
	if c.Pid() != pid {
		t.Fatalf("Restart replaced a running postmaster: pid %d -> %d", pid, c.Pid())
	}
}

func connects(c *Cluster) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return false
	}
	conn.Close(ctx)
	return true
}

// TestRunningErrorGivesTheRunningURL: a second Start on a running cluster
// says how to reach it, so a local tool can work beside its owner.
func TestRunningErrorGivesTheRunningURL(t *testing.T) {
	requireBinaries(t)
	dir := dataDir(t)
	c := start(t, Options{DataDir: dir})
	_, err := Start(testenv.Context(t), Options{DataDir: dir, Logger: testenv.Logger(t)})
	var re *RunningError
	if !errors.As(err, &re) || !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second Start = %v, want a *RunningError", err)
	}
	if re.Pid != c.Pid() || re.URL != c.URL() {
		t.Fatalf("RunningError = %+v, want pid %d and URL %s", re, c.Pid(), c.URL())
	}
}
