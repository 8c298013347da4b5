package api_test

import (
	"net/http"
	"testing"

	"github.com/multiplane/multiplane/api"
	"github.com/multiplane/multiplane/auth"
	"github.com/multiplane/multiplane/history"
	"github.com/multiplane/multiplane/inventory"
	"github.com/multiplane/multiplane/planes"
)

func TestSeriesAndLink(t *testing.T) {
	var rec *history.Recorder
	f := newFixture(t, func(d *api.Deps) {
		rec = history.New(history.Config{MaxLinks: 64}, d.Health)
		d.History = rec
		prev := d.OnTopology
		d.OnTopology = func(s *inventory.Snapshot) {
			prev(s)
			rec.SetTopology(s.Topology, s.Links)
		}
	})
	f.loadExample()
	viewer := f.mint("viewer", auth.RoleViewer)
	f.engine.ObserveInterfaces([]planes.InterfaceSample{{Switch: "p1-sw1", Interface: "Ethernet16", Oper: planes.OperDown}})
	rec.Sample()

	var cols history.Columns
	r := f.do("GET", "/api/v1/planes/p1/series?since=1m", viewer, nil)
	if r.Code != http.StatusOK {
		t.Fatalf("plane series: %d %s", r.Code, r.Body)
	}
	r.json(t, &cols)
	if cols.Name != "p1" || cols.StepSeconds != 1 || len(cols.T) != 1 || cols.State[0] != "degraded" || cols.CapacityRatio[0] != 0.875 {
		t.Fatalf("plane series %+v", cols)
	}
	r = f.do("GET", "/api/v1/links/p1-sw1:Ethernet16/series?since=1m&step=1s", viewer, nil)
	r.json(t, &cols)
	if r.Code != http.StatusOK || len(cols.State) != 1 || cols.State[0] != "down" || cols.TrafficBps == nil {
		t.Fatalf("link series: %d %+v", r.Code, cols)
	}
	var link planes.LinkStatus
	r = f.do("GET", "/api/v1/links/p1-sw1:Ethernet16", viewer, nil)
	r.json(t, &link)
	if r.Code != http.StatusOK || link.State != planes.LinkDown || link.Endpoint != "host-c" {
		t.Fatalf("link: %d %+v", r.Code, link)
	}
	for _, tc := range []struct {
		path string
		want int
		code string
	}{
		{"/api/v1/planes/p9/series", 404, "not_found"},
		{"/api/v1/links/nope:x", 404, "not_found"},
		{"/api/v1/links/nope:x/series", 404, "not_found"},
		{"/api/v1/planes/p1/series?since=yesterday", 400, "invalid_parameter"},
		{"/api/v1/planes/p1/series?since=-5m", 400, "invalid_parameter"},
		{"/api/v1/planes/p1/series?step=5s", 400, "invalid_parameter"},
		{"/api/v1/planes/p1/series?until=now", 400, "invalid_parameter"},
	} {
		r := f.do("GET", tc.path, viewer, nil)
		if code, _, _ := r.apiError(t); r.Code != tc.want || code != tc.code {
			t.Errorf("GET %s = %d %s, want %d %s", tc.path, r.Code, code, tc.want, tc.code)
		}
	}
	if r := f.do("GET", "/api/v1/planes/p1/series", "", nil); r.Code != http.StatusUnauthorized {
		t.Errorf("series without a token: %d", r.Code)
	}
}
