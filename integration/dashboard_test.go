package integration

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/multiplane/multiplane/demo"
	"github.com/multiplane/multiplane/internal/testenv"
)

// TestDashboardInABrowser runs web/browsertest/dashboard.mjs (Chromium,
// playwright-core) against fabricd, a userspace fabric with traffic, and
// a control endpoint the script calls to fail and restore a plane and to
// stop fabricd. MULTIPLANE_SCREENSHOTS=DIR keeps its screenshots.
func TestDashboardInABrowser(t *testing.T) {
	chromium := testenv.RequireCommand(t, "chromium")
	node := testenv.RequireCommand(t, "node")
	_, err := os.Stat("../node_modules/playwright-core/package.json")
	testenv.Require(t, err == nil, "needs the npm packages (scripts/deps.sh test: npm ci)")
	env := startEnv(t, nil, func(c *demo.Config) { c.RateBps = 50e6 })

	mux := http.NewServeMux()
	plane := func(r *http.Request) (int, bool) {
		p, err := strconv.Atoi(r.URL.Query().Get("plane"))
		return p, err == nil && p >= 0 && p < len(env.Switches)
	}
	mux.HandleFunc("POST /fail", func(w http.ResponseWriter, r *http.Request) {
		if p, ok := plane(r); ok {
			env.Fabric.SetUp(p, false)
			return
		}
		http.Error(w, "plane?", http.StatusBadRequest)
	})
	mux.HandleFunc("POST /restore", func(w http.ResponseWriter, r *http.Request) {
		if p, ok := plane(r); ok {
			env.Fabric.SetUp(p, true)
			return
		}
		http.Error(w, "plane?", http.StatusBadRequest)
	})
	mux.HandleFunc("POST /stop-fabricd", func(http.ResponseWriter, *http.Request) { env.Fabricd.Stop() })
	ctl := httptest.NewServer(mux) // on loopback
	t.Cleanup(ctl.Close)

	ctx, cancel := context.WithTimeout(testenv.Context(t), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "dashboard.mjs")
	cmd.Dir = filepath.Join("..", "web", "browsertest")
	cmd.Env = append(os.Environ(), "DASHBOARD_URL="+env.Fabricd.URL(), "TOKEN="+env.Fabricd.Token(),
		"CONTROL_URL="+ctl.URL, "CHROMIUM="+chromium, "SCREENSHOTS="+os.Getenv("MULTIPLANE_SCREENSHOTS"))
	out, err := cmd.CombinedOutput()
	t.Logf("dashboard.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the dashboard failed in the browser: %v", err)
	}
}
