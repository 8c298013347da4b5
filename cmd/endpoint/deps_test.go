package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The agent binary runs on every host: it must not carry the control
// plane's code (topology and health, PostgreSQL, the REST API).
func TestEndpointLinksNoControlPlane(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/multiplane/multiplane/planes",
		"github.com/multiplane/multiplane/store",
		"github.com/multiplane/multiplane/policy",
		"github.com/multiplane/multiplane/api",
		"github.com/gin-gonic/gin",
		"github.com/jackc/pgx",
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages: %q", len(deps), deps)
	}
	for _, d := range deps {
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, f+"/") {
				t.Errorf("endpoint links %s", d)
			}
		}
	}
}
