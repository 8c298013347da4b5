package api

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"
)

// TestOpenAPIMatchesRoutes fails when a route is missing from openapi.yaml
// or documented there but not routed.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string                    `yaml:"openapi"`
		Paths   map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q, want 3.x", doc.OpenAPI)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	param := regexp.MustCompile(`:([A-Za-z_]+)`)
	var routed, heads []string
	for _, r := range New(Deps{}).Routes() {
		route := r.Method + " " + param.ReplaceAllString(r.Path, "{$1}")
		if r.Method == "HEAD" { // every GET answers HEAD, documented once in the info
			heads = append(heads, strings.TrimPrefix(route, "HEAD "))
			continue
		}
		routed = append(routed, route)
	}
	for _, r := range routed {
		if path, ok := strings.CutPrefix(r, "GET "); ok && !slices.Contains(heads, path) {
			t.Errorf("GET %s does not answer HEAD", path)
		}
	}
	slices.Sort(documented)
	slices.Sort(routed)
	for _, r := range routed {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in openapi.yaml", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routed, d) {
			t.Errorf("openapi.yaml documents %s, which is not routed", d)
		}
	}
}
