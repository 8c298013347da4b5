package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/store/pgcluster"
)

// fabricd is a running fabricd binary.
type fabricd struct {
	cmd  *exec.Cmd
	api  string // http://host:port
	logs *bytes.Buffer
	done chan error
}

func buildFabricd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fabricd")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// dataDir makes a data directory the postgres user can reach when root.
func dataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fabricd-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func startFabricd(t *testing.T, bin string, args ...string) *fabricd {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--listen", "127.0.0.1:0", "--log-format", "json"}, args...)...)
	stderr, _ := cmd.StderrPipe()
	f := &fabricd{cmd: cmd, logs: &bytes.Buffer{}, done: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			f.logs.Write(append(sc.Bytes(), '\n'))
			var line struct{ Msg, API string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "fabricd ready" {
				ready <- strings.TrimSuffix(line.API, "/api/v1")
			}
		}
		f.done <- cmd.Wait()
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	select {
	case f.api = <-ready:
	case err := <-f.done:
		t.Fatalf("fabricd exited at start: %v\n%s", err, f.logs)
	case <-time.After(90 * time.Second):
		t.Fatalf("fabricd not ready after 90s\n%s", f.logs)
	}
	return f
}

// stop signals fabricd and requires exit status 0 within 5 s.
func (f *fabricd) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	start := time.Now()
	f.cmd.Process.Signal(sig)
	select {
	case err := <-f.done:
		if err != nil {
			t.Fatalf("fabricd exited with %v after %s\n%s", err, sig, f.logs)
		}
		t.Logf("fabricd exited 0 %v after %s", time.Since(start).Round(time.Millisecond), sig)
	case <-time.After(5 * time.Second):
		t.Fatalf("fabricd still running 5s after %s\n%s", sig, f.logs)
	}
}

func (f *fabricd) get(t *testing.T, path, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", f.api+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// processesUnder lists pids whose command line mentions dir.
func processesUnder(dir string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if bytes.Contains(cmdline, []byte(dir)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func waitNoProcesses(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(processesUnder(dir)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("processes left behind under %s: %v", dir, processesUnder(dir))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func planeCount(t *testing.T, f *fabricd, token string) int {
	t.Helper()
	code, body := f.get(t, "/api/v1/planes", token)
	var resp struct {
		Items []struct{ Name, State string }
	}
	if code != 200 || json.Unmarshal(body, &resp) != nil {
		t.Fatalf("GET planes = %d %s", code, body)
	}
	return len(resp.Items)
}

// TestFabricdLifecycle runs the binary as a user would: first start with the
// example topology, API with and without a token, clean exit on SIGINT with
// nothing left running, restart keeping the data, and kill -9 leaving no
// PostgreSQL behind.
func TestFabricdLifecycle(t *testing.T) {
	_, err := pgcluster.FindBinDir()
	testenv.Require(t, err == nil, "needs PostgreSQL server binaries (Debian package postgresql)")
	bin := buildFabricd(t)
	dir := dataDir(t)

	f := startFabricd(t, bin, "--data-dir", dir, "--topology", "../../examples/topology.yaml")
	token, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "admin.token")); fi.Mode().Perm() != 0o600 {
		t.Errorf("admin.token mode %v, want 0600", fi.Mode().Perm())
	}
	if n := strings.Count(f.logs.String(), "admin token written"); n != 1 {
		t.Errorf("admin token announced %d times, want once", n)
	}
	secret := strings.TrimSpace(string(token))
	if n := planeCount(t, f, secret); n != 4 {
		t.Fatalf("planes = %d, want 4", n)
	}
	if code, _ := f.get(t, "/api/v1/planes", ""); code != 401 {
		t.Fatalf("no token = %d, want 401", code)
	}
	if code, body := f.get(t, "/readyz", ""); code != 200 {
		t.Fatalf("readyz = %d %s", code, body)
	}
	f.stop(t, syscall.SIGINT)
	waitNoProcesses(t, dir)

	// Restart without --topology: the data is still there, no new admin token.
	f = startFabricd(t, bin, "--data-dir", dir)
	if n := planeCount(t, f, secret); n != 4 {
		t.Fatalf("after restart planes = %d, want 4", n)
	}
	if strings.Contains(f.logs.String(), "admin token written") {
		t.Error("restart minted another admin token")
	}
	f.stop(t, syscall.SIGTERM)
	waitNoProcesses(t, dir)

	// kill -9: the private PostgreSQL must not outlive fabricd.
	f = startFabricd(t, bin, "--data-dir", dir)
	f.cmd.Process.Kill()
	<-f.done
	waitNoProcesses(t, dir)

	// And it starts again after the crash.
	f = startFabricd(t, bin, "--data-dir", dir)
	if n := planeCount(t, f, secret); n != 4 {
		t.Fatalf("after crash planes = %d, want 4", n)
	}
	f.stop(t, syscall.SIGTERM)
	waitNoProcesses(t, dir)
}

func TestFabricdBadTopologyFailsClearly(t *testing.T) {
	_, err := pgcluster.FindBinDir()
	testenv.Require(t, err == nil, "needs PostgreSQL server binaries (Debian package postgresql)")
	bin := buildFabricd(t)
	dir := dataDir(t)
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("planes:\n  - name: p0\nendpoints:\n  - name: a\n    ports:\n      - {plane: p9, address: 10.0.0.1, switch: s, interface: E0}\n"), 0o644)
	out, err := exec.Command(bin, "--data-dir", dir, "--listen", "127.0.0.1:0", "--topology", bad).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit = %v, want status 1\n%s", err, out)
	}
	if !strings.Contains(string(out), `line 6: endpoints[0].ports[0].plane: unknown plane \"p9\"`) {
		t.Fatalf("error does not name field and line:\n%s", out)
	}
	waitNoProcesses(t, dir)
}

func TestHelpDocumentsEveryFlag(t *testing.T) {
	bin := buildFabricd(t)
	out, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	for _, flag := range []string{"listen", "data-dir", "database-url", "topology", "etcd-endpoints", "etcd-ca", "log-format", "log-level", "config"} {
		if !strings.Contains(string(out), "--"+flag) {
			t.Errorf("--help lacks --%s", flag)
		}
	}
	if !strings.Contains(string(out), "FABRICD_DATA_DIR") {
		t.Error("--help lacks environment twins")
	}
}

// TestVersion: --version prints what make build stamps in, and exits 0
// before it starts anything.
func TestVersion(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fabricd")
	pkg := "github.com/multiplane/multiplane/internal/version"
	ld := "-X " + pkg + ".module=v9.8.7 -X " + pkg + ".commit=0123456789ab"
	if out, err := exec.Command("go", "build", "-ldflags", ld, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version", "--data-dir", "/nonexistent/x").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "fabricd v9.8.7, commit 0123456789ab, go") {
		t.Fatalf("--version: %v\n%s", err, out)
	}
}

// TestAdminTokenRefusesBadFlags: fabricd admin-token exits 2 (a usage
// error) on a bad --token-name or --token-ttl, before it starts anything:
// the data directory does not exist, which would otherwise exit 1.
func TestAdminTokenRefusesBadFlags(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for _, args := range [][]string{
		{"--token-name", "a\x01b"},
		{"--token-name", strings.Repeat("n", 5000)},
		{"--token-ttl", "2562047h"},
		{"--token-ttl", "-1s"},
	} {
		if code := adminToken(append([]string{"--data-dir", missing}, args...)); code != 2 {
			t.Errorf("admin-token %.60q: exit %d, want 2", args, code)
		}
	}
	if code := adminToken([]string{"--data-dir", missing, "--token-name", "ok"}); code != 1 {
		t.Errorf("admin-token with good flags and no data dir: exit %d, want 1", code)
	}
}
