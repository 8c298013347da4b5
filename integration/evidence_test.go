package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/demo"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/planes"
)

// TestEndpointEvidenceUnderACutStream cuts a switch's gNMI stream while its
// ports carry traffic (4 hosts in a ring, each sending to the next): the
// switch stays unreachable and its links stay up on the endpoints'
// evidence past the unreachable hold; a port that then fails is judged
// down within 2 s, the others stay up; once the switch is back its
// telemetry judges again.
func TestEndpointEvidenceUnderACutStream(t *testing.T) {
	const hold = 2 * time.Second
	env := startEnv(t, nil, func(c *demo.Config) {
		c.Hosts, c.Ring = 4, true
		c.FabricdArgs = append(c.FabricdArgs, "--health-unreachable-hold", hold.String(), "--health-up-hold", "1s", "--telemetry-backoff-max", "1s")
	})
	ctx := testenv.Context(t)
	const plane, sw = "p1", "p1-sw1"
	links := func() []planes.LinkStatus {
		var body struct{ Items []planes.LinkStatus }
		if err := env.Fabricd.GetJSON(ctx, "/api/v1/links?plane="+plane, &body); err != nil {
			t.Fatal(err)
		}
		return body.Items
	}
	reachable := func() bool {
		var s planes.SwitchStatus
		if err := env.Fabricd.GetJSON(ctx, "/api/v1/switches/"+sw, &s); err != nil {
			t.Fatal(err)
		}
		return s.Reachable
	}
	testutil.WaitFor(t, 20*time.Second, "endpoint evidence up on every link of "+plane, func() bool {
		ls := links()
		for _, l := range ls {
			if l.Evidence == nil || l.Evidence.State != planes.LinkUp {
				return false
			}
		}
		return len(ls) == 4
	})

	// The stream is cut; the ports still carry traffic.
	env.Switches[1].Stop()
	cut := time.Now()
	testutil.WaitFor(t, 10*time.Second, sw+" unreachable", func() bool { return !reachable() })
	for time.Since(cut) < hold+2*time.Second { // past the hold, every look shows every link up
		for _, l := range links() {
			if l.State != planes.LinkUp {
				t.Fatalf("%v after the cut, link %s is %s (%s), want up on endpoint evidence", time.Since(cut).Round(time.Millisecond), l.Name, l.State, l.Reason)
			}
		}
		if reachable() {
			t.Fatalf("%s reachable again with its stream cut", sw)
		}
		time.Sleep(200 * time.Millisecond) // the interval between looks
	}
	for _, l := range links() {
		if !strings.Contains(l.Reason, "endpoint evidence") {
			t.Errorf("link %s up for %q, want the endpoint evidence named", l.Name, l.Reason)
		}
	}

	// host-a's port on the plane fails under the cut stream.
	failed := "p1-sw1:eth1"
	env.Fabric.SetLinkUp(0, 1, false)
	failedAt := time.Now()
	var down planes.LinkStatus
	testutil.WaitFor(t, 10*time.Second, failed+" down", func() bool {
		for _, l := range links() {
			if l.Name == failed && l.State == planes.LinkDown {
				down = l
				return true
			}
		}
		return false
	})
	took := time.Since(failedAt)
	t.Logf("%s judged down %v after the port failed: %s", failed, took.Round(time.Millisecond), down.Reason)
	if took > 2*time.Second {
		t.Errorf("the failed port took %v to be judged down, want within 2 s", took)
	}
	for _, l := range links() {
		if l.Name != failed && l.State != planes.LinkUp {
			t.Errorf("link %s is %s (%s); only %s failed", l.Name, l.State, l.Reason, failed)
		}
	}
	var st contract.StatusDoc
	if err := env.Fabricd.GetJSON(ctx, "/api/v1/endpoints/host-a/status", &st); err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Paths {
		if p.Plane == plane && (p.PeersReachable != 0 || p.PeersUnreachable == 0) {
			t.Errorf("host-a's status on %s: %+v, want its peers unreachable", plane, p)
		}
	}

	// Repaired and back: the switch's own word brings the port up.
	env.Fabric.SetLinkUp(0, 1, true)
	if err := env.Switches[1].Resume(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, failed+" up again from telemetry", func() bool {
		if !reachable() {
			return false
		}
		for _, l := range links() {
			if l.Name == failed {
				return l.State == planes.LinkUp && !strings.Contains(l.Reason, "endpoint evidence")
			}
		}
		return false
	})
}
