package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/multiplane/multiplane/internal/fabricdproc"
	"github.com/multiplane/multiplane/internal/testenv"
)

// TestHistoryAndStreamsSurviveRestart takes a link down at an emulated
// switch, restarts fabricd, and checks that the history is still there, the
// link is still down, and telemetry resumed on every switch by itself.
func TestHistoryAndStreamsSurviveRestart(t *testing.T) {
	env := startEnv(t, nil)
	ctx := testenv.Context(t)
	env.Fabric.SetLinkUp(0, 2, false) // host-a's port on p2
	const link = "p2-sw1:eth1"
	waitLink(t, env.Fabricd, link, "down", 10*time.Second)
	before := 0
	for deadline := time.Now().Add(5 * time.Second); before == 0; before = linkEvents(t, ctx, env.Fabricd, link) {
		if time.Now().After(deadline) {
			t.Fatal("no event recorded for the link that went down")
		}
		time.Sleep(50 * time.Millisecond)
	}

	env.Fabricd.Stop()
	if err := env.StartFabricd(ctx); err != nil {
		t.Fatal(err)
	}
	if n := linkEvents(t, ctx, env.Fabricd, link); n != before {
		t.Fatalf("after the restart the link has %d events, before %d", n, before)
	}
	var l struct{ State string }
	if err := env.Fabricd.GetJSON(ctx, "/api/v1/links?switch=p2-sw1&endpoint=host-a", &struct {
		Items []*struct{ State string }
	}{Items: []*struct{ State string }{&l}}); err != nil {
		t.Fatal(err)
	}
	if l.State != "down" {
		t.Fatalf("after the restart %s is %q, want down", link, l.State)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var sws struct {
			Items []struct {
				Name              string
				Reachable, Synced bool
			}
		}
		if err := env.Fabricd.GetJSON(ctx, "/api/v1/switches", &sws); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range sws.Items {
			if s.Reachable && s.Synced {
				n++
			}
		}
		if n == len(env.Switches) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("telemetry did not resume on every switch after the restart: %+v", sws.Items)
		}
		time.Sleep(100 * time.Millisecond)
	}

	env.Fabric.SetLinkUp(0, 2, true)
	waitLink(t, env.Fabricd, link, "up", 20*time.Second)
	for deadline := time.Now().Add(5 * time.Second); linkEvents(t, ctx, env.Fabricd, link) <= before; {
		if time.Now().After(deadline) {
			t.Fatal("the recovery after the restart was not recorded")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitLink(t *testing.T, fd *fabricdproc.Proc, link, state string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var links struct {
			Items []struct{ Name, State string }
		}
		if err := fd.GetJSON(context.Background(), "/api/v1/links?state="+state+"&limit=1000", &links); err == nil {
			for _, l := range links.Items {
				if l.Name == link {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("link %s not %s within %v", link, state, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func linkEvents(t *testing.T, ctx context.Context, fd *fabricdproc.Proc, link string) int {
	t.Helper()
	var evs struct{ Items []struct{ To string } }
	if err := fd.GetJSON(ctx, fmt.Sprintf("/api/v1/events?subject=%s&limit=1000", link), &evs); err != nil {
		t.Fatal(err)
	}
	return len(evs.Items)
}
