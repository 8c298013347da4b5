package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/kv/kvtest"
)

func TestConvergenceCountsVersions(t *testing.T) {
	s := kvtest.New(t)
	ctx := context.Background()
	put := func(key string, v any) {
		data, _ := json.Marshal(v)
		if _, err := s.Client.Put(ctx, key, string(data)); err != nil {
			t.Fatal(err)
		}
	}
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
