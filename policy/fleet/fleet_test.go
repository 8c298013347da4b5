package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/kv/kvtest"
)

func TestConvergenceCountsVersions(t *testing.T) {
	s := kvtest.New(t)
	ctx := context.Background()
	put := func(key string, v any) { putJSON(t, s.Client, key, v) }
	put(contract.KeyGeneration, contract.GenerationDoc{Generation: 5})
	var expected []string
	for i := range 40 {
		name := fmt.Sprintf("h%02d", i)
		expected = append(expected, name)
		put(contract.KeyEndpoint(name), map[string]any{"generation": 5})
		version := "v1.2.0 abc"
		switch {
		case i < 3:
			version = "v1.1.0 def"
		case i == 3:
			version = ""
		case i == 4:
			version = strings.Repeat("x", 200)
		case i >= 10:
			version = fmt.Sprintf("v0.%d", i) // 30 distinct: past the bound
		}
		if i == 39 {
			continue // not reporting
		}
		put(contract.KeyStatus(name), contract.StatusDoc{Endpoint: name, AppliedGeneration: 5, Version: version})
	}
	put(contract.KeyStatus("not-in-topology"), contract.StatusDoc{Version: "v9"})
	v, err := New(s.Client).Convergence(ctx, expected)
	if err != nil {
		t.Fatal(err)
	}
	if v.Reporting != 39 || v.Applied != 39 || len(v.Laggards) != 1 {
		t.Fatalf("view %+v", v)
	}
	sum := 0
	for k, n := range v.Versions {
		sum += n
		if len(k) > maxVersionLen+len("…") {
			t.Errorf("version %q longer than the bound", k)
		}
	}
	if sum != 39 || len(v.Versions) != maxVersions || v.Versions["v1.1.0 def"] != 3 || v.Versions["v1.2.0 abc"] != 5 ||
		v.Versions["unknown"] != 1 || v.Versions["other"] == 0 || v.Versions["v9"] != 0 {
		t.Fatalf("versions %v", v.Versions)
	}
}

func TestCollectorExportsAgents(t *testing.T) {
	s := kvtest.New(t)
	put := func(key string, v any) { putJSON(t, s.Client, key, v) }
	put(contract.KeyGeneration, contract.GenerationDoc{Generation: 7})
	put(contract.KeyStatus("h1"), contract.StatusDoc{Endpoint: "h1", AppliedGeneration: 7})
	put(contract.KeyStatus("h3"), contract.StatusDoc{Endpoint: "h3", AppliedGeneration: 6})
	put(contract.KeyStatus("stranger"), contract.StatusDoc{Endpoint: "stranger", AppliedGeneration: 9})
	c := New(s.Client).Collector(func(context.Context) ([]string, error) { return []string{"h1", "h2", "h3"}, nil })
	// h1 is current and named by no series; h2 is silent, h3 behind.
	want := `
# HELP multiplane_fleet_agent_applied_generation The generation an agent behind the target or silent applied (0: no status); agents that are current have no series.
# TYPE multiplane_fleet_agent_applied_generation gauge
multiplane_fleet_agent_applied_generation{endpoint="h2"} 0
multiplane_fleet_agent_applied_generation{endpoint="h3"} 6
# HELP multiplane_fleet_agent_reporting 1 when an agent behind the target has a live status in etcd, 0 when silent; agents that are current have no series.
# TYPE multiplane_fleet_agent_reporting gauge
multiplane_fleet_agent_reporting{endpoint="h2"} 0
multiplane_fleet_agent_reporting{endpoint="h3"} 1
# HELP multiplane_fleet_agents Endpoints of the topology by agent state: current (applied the target generation), behind, silent (no live status).
# TYPE multiplane_fleet_agents gauge
multiplane_fleet_agents{state="behind"} 1
multiplane_fleet_agents{state="current"} 1
multiplane_fleet_agents{state="silent"} 1
# HELP multiplane_fleet_target_generation The fabric generation the generation key announces.
# TYPE multiplane_fleet_target_generation gauge
multiplane_fleet_target_generation 7
`
	if err := promtest.CollectAndCompare(c, strings.NewReader(want), "multiplane_fleet_agent_applied_generation",
		"multiplane_fleet_agent_reporting", "multiplane_fleet_agents", "multiplane_fleet_target_generation"); err != nil {
		t.Fatal(err)
	}
}

// A fleet far behind (a new generation just published) names at most
// MaxListed endpoints; the counts hold them all.
func TestCollectorBoundsTheEndpointsItNames(t *testing.T) {
	s := kvtest.New(t)
	putJSON(t, s.Client, contract.KeyGeneration, contract.GenerationDoc{Generation: 2})
	var names []string
	for i := range MaxListed + 500 {
		names = append(names, fmt.Sprintf("h%d", i))
	}
	c := New(s.Client).Collector(func(context.Context) ([]string, error) { return names, nil })
	if n := promtest.CollectAndCount(c, "multiplane_fleet_agent_applied_generation"); n != MaxListed {
		t.Fatalf("%d endpoints named, want %d", n, MaxListed)
	}
	want := fmt.Sprintf(`
# HELP multiplane_fleet_agents Endpoints of the topology by agent state: current (applied the target generation), behind, silent (no live status).
# TYPE multiplane_fleet_agents gauge
multiplane_fleet_agents{state="behind"} 0
multiplane_fleet_agents{state="current"} 0
multiplane_fleet_agents{state="silent"} %d
`, len(names))
	if err := promtest.CollectAndCompare(c, strings.NewReader(want), "multiplane_fleet_agents"); err != nil {
		t.Fatal(err)
	}
}

func putJSON(t *testing.T, cli *clientv3.Client, key string, v any) {
	t.Helper()
	data, _ := json.Marshal(v)
	if _, err := cli.Put(context.Background(), key, string(data)); err != nil {
		t.Fatal(err)
	}
}

// A plane event does not rewrite endpoint documents: an agent has converged
// once it applied the planes' generation too.
func TestConvergenceWaitsForThePlanes(t *testing.T) {
	s := kvtest.New(t)
	put := func(key string, v any) { putJSON(t, s.Client, key, v) }
	put(contract.KeyGeneration, contract.GenerationDoc{Generation: 6, PlanesGeneration: 5})
	for name, applied := range map[string]uint64{"old": 3, "new": 5, "nodoc": 6} {
		if name != "nodoc" {
			put(contract.KeyEndpoint(name), map[string]any{"generation": 3})
		}
		put(contract.KeyStatus(name), contract.StatusDoc{Endpoint: name, AppliedGeneration: applied})
	}
	v, err := New(s.Client).Convergence(context.Background(), []string{"old", "new", "nodoc"})
	if err != nil {
		t.Fatal(err)
	}
	if v.Applied != 1 || len(v.Laggards) != 2 || v.Laggards[0].Endpoint != "nodoc" || v.Laggards[1].Endpoint != "old" {
		t.Fatalf("view %+v: want only \"new\" converged", v)
	}
}
