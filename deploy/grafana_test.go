package deploy

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/multiplane/multiplane/internal/fabricdtest"
	"github.com/multiplane/multiplane/internal/testenv"
)

// grafanaDashboard is what the test reads of a dashboard.
type grafanaDashboard struct {
	Title, UID string
	Panels     []struct {
		Title      string
		Datasource struct{ Type, UID string }
		Targets    []struct{ Expr, RefID string }
	}
}

var metricName = regexp.MustCompile(`\bmultiplane_[a-z0-9_]+\b`)

// TestGrafanaQueriesUseExportedMetrics reads every query of the Grafana
// dashboards in deploy/grafana and checks each metric it names against
// what a real fabricd (example topology) exports at /metrics.
func TestGrafanaQueriesUseExportedMetrics(t *testing.T) {
	files, err := filepath.Glob("grafana/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	used := map[string][]string{} // metric → panels
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d grafanaDashboard
		dec := json.NewDecoder(strings.NewReader(string(data)))
		if err := dec.Decode(&d); err != nil || d.UID == "" || len(d.Panels) == 0 {
			t.Fatalf("%s: %v (uid %q, %d panels)", f, err, d.UID, len(d.Panels))
		}
		for _, p := range d.Panels {
			if p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
				t.Errorf("%s: panel %q: datasource %+v, %d targets", f, p.Title, p.Datasource, len(p.Targets))
			}
			for _, tg := range p.Targets {
				names := metricName.FindAllString(tg.Expr, -1)
				if len(names) == 0 {
					t.Errorf("%s: panel %q: query %q names no multiplane metric", f, p.Title, tg.Expr)
				}
				for _, n := range names {
					used[n] = append(used[n], p.Title)
				}
			}
		}
	}

	ctx := testenv.Context(t)
	// Nothing serves the example's switches: their links go down after the
	// unreachable hold, so the series of links not up exist too.
	p := fabricdtest.Start(t, "--topology", fabricdtest.ExampleTopology(t), "--health-unreachable-hold", "1s")
	var exported map[string]*dto.MetricFamily
	missing := func() []string {
		resp, err := p.Do(ctx, http.MethodGet, "/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		parser := expfmt.NewTextParser(model.UTF8Validation)
		exported, err = parser.TextToMetricFamilies(resp.Body)
		if err != nil {
			t.Fatalf("/metrics: %v", err)
		}
		var out []string
		for n := range used {
			family := n
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(n, suffix); ok && exported[base] != nil && exported[base].GetType() == dto.MetricType_HISTOGRAM {
					family = base
				}
			}
			if mf := exported[family]; mf == nil || len(mf.GetMetric()) == 0 {
				out = append(out, n)
			}
		}
		slices.Sort(out)
		return out
	}
	// The fleet's gauges appear once the first generation is published,
	// link states once the unreachable hold has passed.
	deadline := time.Now().Add(30 * time.Second)
	for m := missing(); len(m) > 0; m = missing() {
		if time.Now().After(deadline) {
			for _, n := range m {
				t.Errorf("metric %s (panels %q) is not exported by fabricd", n, used[n])
			}
			return
		}
		time.Sleep(200 * time.Millisecond) // between scrapes
	}
	t.Logf("%d metrics used by the dashboards, all exported", len(used))
}
