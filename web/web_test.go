package web

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
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
