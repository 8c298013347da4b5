package web

import (
	"bytes"
	"io"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/multiplane/multiplane/internal/testenv"
)

func TestServesDashboard(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	for path, want := range map[string]string{"/": "<title>Multiplane</title>", "/app.js": "/api/v1/stream", "/app.css": ".healthy"} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("GET %s = %d, body lacks %q", path, resp.StatusCode, want)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q does not forbid framing", path, csp)
		}
		if resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: X-Frame-Options %q, want DENY", path, resp.Header.Get("X-Frame-Options"))
		}
	}
	if resp, _ := srv.Client().Get(srv.URL + "/nope.js"); resp.StatusCode != 404 {
		t.Errorf("unknown file = %d", resp.StatusCode)
	}
}

// The embedded uPlot is the build of the version package.json pins: a
// version bump must copy the new build (cp node_modules/uplot/dist/...).
func TestEmbeddedUPlotIsThePinnedBuild(t *testing.T) {
	for _, f := range []string{"uPlot.iife.min.js", "uPlot.min.css"} {
		pinned, err := os.ReadFile("../node_modules/uplot/dist/" + f)
		testenv.Require(t, err == nil, "needs the npm packages (scripts/deps.sh test: npm ci)")
		embedded, err := static.ReadFile("static/vendor/" + f)
		if err != nil || !bytes.Equal(pinned, embedded) {
			t.Errorf("web/static/vendor/%s differs from node_modules/uplot/dist/%s (%v)", f, f, err)
		}
	}
}
