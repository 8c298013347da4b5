package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/multiplane/multiplane/demo"
	"github.com/multiplane/multiplane/internal/testenv"
)

// dashboardEnv starts the system (fabricd with the demo control, which the
// dashboard drives) with an endpoint for the browser scripts to stop
// fabricd and read its RSS.
func dashboardEnv(t *testing.T) (*demo.Env, *httptest.Server) {
	env := startEnv(t, nil, func(c *demo.Config) { c.RateBps = 50e6 })
	mux := http.NewServeMux()
	mux.HandleFunc("POST /stop-fabricd", func(http.ResponseWriter, *http.Request) { env.Fabricd.Stop() })
	mux.HandleFunc("GET /fabricd-rss", func(w http.ResponseWriter, _ *http.Request) {
		// RSS and its parts: anonymous (Go heap, stacks) and file-backed
		// (the binary's pages, the embedded etcd's mapped database).
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", env.Fabricd.Pid()))
		kib := map[string]int64{}
		for _, k := range []string{"VmRSS", "RssAnon", "RssFile"} {
			m := regexp.MustCompile(k + `:\s+(\d+) kB`).FindSubmatch(status)
			if err != nil || m == nil {
				http.Error(w, "no "+k, http.StatusInternalServerError)
				return
			}
			kib[k], _ = strconv.ParseInt(string(m[1]), 10, 64)
		}
		json.NewEncoder(w).Encode(map[string]int64{"rss_kib": kib["VmRSS"], "anon_kib": kib["RssAnon"], "file_kib": kib["RssFile"]})
	})
	ctl := httptest.NewServer(mux) // on loopback
	t.Cleanup(ctl.Close)
	return env, ctl
}

// runScript runs a browser script of web/browsertest against env.
func runScript(t *testing.T, env *demo.Env, ctl *httptest.Server, script string, timeout time.Duration, extra ...string) {
	chromium := testenv.RequireCommand(t, "chromium")
	node := testenv.RequireCommand(t, "node")
	_, err := os.Stat("../node_modules/playwright-core/package.json")
	testenv.Require(t, err == nil, "needs the npm packages (scripts/deps.sh test: npm ci)")
	ctx, cancel := context.WithTimeout(testenv.Context(t), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = filepath.Join("..", "web", "browsertest")
	cmd.Env = append(append(os.Environ(), "DASHBOARD_URL="+env.Fabricd.URL(), "TOKEN="+env.Fabricd.Token(),
		"CONTROL_URL="+ctl.URL, "CHROMIUM="+chromium), extra...)
	out, err := cmd.CombinedOutput()
	t.Logf("%s:\n%s", script, out)
	if err != nil {
		t.Fatalf("the dashboard failed in the browser: %v", err)
	}
}

// TestDashboardInABrowser runs web/browsertest/dashboard.mjs (Chromium,
// playwright-core) against fabricd and a userspace fabric with traffic;
// the script fails and restores a plane with the dashboard's demo control
// and stops fabricd through a test endpoint. MULTIPLANE_SCREENSHOTS=DIR keeps its screenshots.
func TestDashboardInABrowser(t *testing.T) {
	testenv.RequireCommand(t, "chromium") // before starting anything
	env, ctl := dashboardEnv(t)
	runScript(t, env, ctl, "dashboard.mjs", 3*time.Minute, "SCREENSHOTS="+os.Getenv("MULTIPLANE_SCREENSHOTS"))
}

// TestDashboardSoak leaves the dashboard open against the system for
// MULTIPLANE_SOAK (such as 10m; `make soak-dashboard`): the page's heap
// and fabricd's RSS must stay flat. It is a soak, run on demand, not in
// make test.
func TestDashboardSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("MULTIPLANE_SOAK"))
	if err != nil || d <= 0 {
		t.Skip("a soak: set MULTIPLANE_SOAK=10m (make soak-dashboard)")
	}
	env, ctl := dashboardEnv(t)
	runScript(t, env, ctl, "soak.mjs", d+2*time.Minute, fmt.Sprintf("SOAK_SECONDS=%d", int(d.Seconds())))
}
