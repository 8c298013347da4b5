// Package testenv holds what tests share about their environment: whether a
// requirement (root, network namespaces, PostgreSQL binaries, a browser) is
// met, and a logger that writes to the test log.
//
// A test that cannot run here calls Require; outside CI that skips with the
// reason, and with CI=true it fails, so CI never counts a skipped check as a
// pass.
package testenv

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// InCI reports whether the tests run in CI (CI=true), where every
// requirement must be met.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1" || v == "yes"
}

// Require skips t (or fails it under CI) when ok is false.
func Require(t testing.TB, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if InCI() {
		t.Fatalf("requirement not met in CI (CI=true): %s", why)
	}
	t.Skipf("skipping: %s (set up the machine with `make deps-test`; with CI=true this fails)", why)
}

// RequireRoot requires effective uid 0.
func RequireRoot(t testing.TB) {
	t.Helper()
	Require(t, os.Geteuid() == 0, "needs root")
}

// RequireCommand requires an executable on PATH.
func RequireCommand(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	Require(t, err == nil, "needs "+name+" on PATH")
	return p
}

// RequireNetns requires root and a working `ip netns`.
func RequireNetns(t testing.TB) {
	t.Helper()
	RequireRoot(t)
	RequireCommand(t, "ip")
	err := exec.Command("ip", "netns", "list").Run()
	Require(t, err == nil, "needs network namespaces (ip netns list failed)")
}

// Logger returns a slog logger that writes to t.Logf.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Context returns a context cancelled when the test ends.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}
