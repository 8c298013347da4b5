package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/store/pgcluster"
)

func (f *fabricd) do(t *testing.T, method, path, token string) int {
	t.Helper()
	req, _ := http.NewRequest(method, f.api+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestAdminTokenRecovery: the last admin token cannot be revoked (409), and
// `fabricd admin-token` mints a working, audited admin token from the data
// directory, with fabricd stopped and while it runs.
func TestAdminTokenRecovery(t *testing.T) {
	_, err := pgcluster.FindBinDir()
	testenv.Require(t, err == nil, "needs PostgreSQL server binaries (Debian package postgresql)")
	bin := buildFabricd(t)
	dir := dataDir(t)

	f := startFabricd(t, bin, "--data-dir", dir)
	first, _ := os.ReadFile(filepath.Join(dir, "admin.token"))
	admin := strings.TrimSpace(string(first))
	var toks struct{ Items []struct{ ID int64 } }
	code, body := f.get(t, "/api/v1/tokens", admin)
	if json.Unmarshal(body, &toks); code != 200 || len(toks.Items) != 1 {
		t.Fatalf("GET tokens = %d %s", code, body)
	}
	if code := f.do(t, "DELETE", "/api/v1/tokens/"+strconv.FormatInt(toks.Items[0].ID, 10), admin); code != http.StatusConflict {
		t.Fatalf("revoking the last admin token = %d, want 409", code)
	}
	f.stop(t, syscall.SIGINT)
	waitNoProcesses(t, dir)

	// fabricd stopped: admin-token starts the private cluster and stops it.
	file := filepath.Join(dir, "recovered.token")
	out, err := exec.Command(bin, "admin-token", "--data-dir", dir, "--token-file", file, "--token-name", "offline").CombinedOutput()
	if err != nil {
		t.Fatalf("admin-token with fabricd stopped: %v\n%s", err, out)
	}
	waitNoProcesses(t, dir)
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v", err)
	}
	data, _ := os.ReadFile(file)
	offline := strings.TrimSpace(string(data))

	f = startFabricd(t, bin, "--data-dir", dir)
	if code, body := f.get(t, "/api/v1/tokens", offline); code != 200 {
		t.Fatalf("recovered token: GET tokens = %d %s", code, body)
	}

	// fabricd running: admin-token uses its cluster through the socket.
	cmd := exec.Command(bin, "admin-token", "--data-dir", dir, "--token-name", "online")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("admin-token with fabricd running: %v", err)
	}
	online := strings.TrimSpace(string(stdout))
	if code := f.do(t, "GET", "/api/v1/tokens", online); code != 200 {
		t.Fatalf("token minted beside a running fabricd: GET tokens = %d", code)
	}

	code, body = f.get(t, "/api/v1/audit?limit=100", online)
	var audit struct {
		Items []struct{ Actor, Target string }
	}
	if json.Unmarshal(body, &audit); code != 200 {
		t.Fatalf("GET audit = %d %s", code, body)
	}
	var targets []string
	for _, e := range audit.Items {
		if e.Actor == "fabricd admin-token (local)" {
			targets = append(targets, e.Target)
		}
	}
	if len(targets) != 2 || !strings.Contains(targets[0], "online") || !strings.Contains(targets[1], "offline") {
		t.Fatalf("audit rows of fabricd admin-token: %q, want online and offline", targets)
	}
	f.stop(t, syscall.SIGTERM)
	waitNoProcesses(t, dir)
}

func TestAdminTokenHelp(t *testing.T) {
	bin := buildFabricd(t)
	out, err := exec.Command(bin, "admin-token", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("admin-token --help: %v\n%s", err, out)
	}
	for _, flag := range []string{"data-dir", "database-url", "token-file", "token-name", "token-ttl", "log-level", "config"} {
		if !strings.Contains(string(out), "--"+flag) {
			t.Errorf("admin-token --help lacks --%s", flag)
		}
	}
	if out, _ := exec.Command(bin, "--help").CombinedOutput(); !strings.Contains(string(out), "fabricd admin-token") {
		t.Error("fabricd --help does not mention admin-token")
	}
}

// postmasterPid reads the private cluster's postmaster.pid.
func postmasterPid(t *testing.T, dir string) int {
	t.Helper()
	pid, err := readPostmasterPid(dir)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func readPostmasterPid(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "postgresql", "postgres", "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
}

// restartedFrom reports whether a postmaster other than old runs.
func restartedFrom(dir string, old int) bool {
	pid, err := readPostmasterPid(dir)
	return err == nil && pid != old && syscall.Kill(pid, 0) == nil
}

// TestFabricdRestartsKilledPostgres: kill -9 of the private postmaster;
// fabricd is ready again (/readyz 200 and an authenticated API call) within
// 10 s, each of three times, and counts the restarts.
func TestFabricdRestartsKilledPostgres(t *testing.T) {
	_, err := pgcluster.FindBinDir()
	testenv.Require(t, err == nil, "needs PostgreSQL server binaries (Debian package postgresql)")
	bin := buildFabricd(t)
	dir := dataDir(t)
	f := startFabricd(t, bin, "--data-dir", dir, "--topology", "../../examples/topology.yaml")
	token, _ := os.ReadFile(filepath.Join(dir, "admin.token"))
	secret := strings.TrimSpace(string(token))

	const kills = 3
	var took []time.Duration
	for i := range kills {
		old := postmasterPid(t, dir)
		killed := time.Now()
		if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for {
			if time.Since(killed) > 10*time.Second {
				t.Fatalf("kill %d: fabricd not ready 10s after kill -9 of its postmaster\n%s", i+1, f.logs)
			}
			select {
			case err := <-f.done:
				t.Fatalf("fabricd exited: %v\n%s", err, f.logs)
			default:
			}
			code, body := f.get(t, "/readyz", "")
			if code == http.StatusServiceUnavailable && strings.Contains(string(body), dir) {
				t.Fatalf("/readyz shows internal paths: %s", body)
			}
			// Backends outlive their postmaster for a moment: ready counts
			// only once a new postmaster runs.
			if code == 200 && restartedFrom(dir, old) {
				if code, _ := f.get(t, "/api/v1/planes", secret); code == 200 {
					break
				}
			}
			time.Sleep(20 * time.Millisecond) // poll interval
		}
		took = append(took, time.Since(killed))
		// The server answers a moment before fabricd has counted the
		// restart; a kill in between would be a failed restart instead.
		want := "multiplane_store_postgres_restarts_total " + strconv.Itoa(i+1)
		testutil.WaitFor(t, 5*time.Second, want, func() bool {
			_, body := f.get(t, "/metrics", "")
			return strings.Contains(string(body), "\n"+want+"\n")
		})
	}
	slices.Sort(took)
	t.Logf("ready again after kill -9 of the postmaster: %v (median %v)", took, took[len(took)/2])
	f.stop(t, syscall.SIGTERM)
	waitNoProcesses(t, dir)
}
