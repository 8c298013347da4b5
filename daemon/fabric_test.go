package daemon

import (
	"testing"

	"github.com/multiplane/multiplane/planes"
)

// Only transitions towards health are recoveries, which the publisher may
// hold longer; a failure or a drain must not be taken for one.
func TestRecoveryIsATransitionTowardsHealth(t *testing.T) {
	for _, tc := range []struct {
		kind, from, to string
		want           bool
	}{
		{planes.SubjectLink, "down", "up", true},
		{planes.SubjectLink, "degraded", "up", true},
		{planes.SubjectLink, "down", "degraded", true},
		{planes.SubjectPlane, "down", "degraded", true},
		{planes.SubjectSwitch, "degraded", "healthy", true},
		{planes.SubjectLink, "up", "down", false},
		{planes.SubjectLink, "up", "degraded", false},
		{planes.SubjectPlane, "healthy", "down", false},
		{planes.SubjectPlane, "healthy", "draining", false},
		{planes.SubjectPlane, "draining", "healthy", false},
		{planes.SubjectPlane, "", "healthy", false},
	} {
		ev := planes.Event{SubjectKind: tc.kind, Kind: planes.EventStateChange, From: tc.from, To: tc.to}
		if got := recovery(ev); got != tc.want {
			t.Errorf("%s %s -> %s: recovery %v, want %v", tc.kind, tc.from, tc.to, got, tc.want)
		}
	}
	if recovery(planes.Event{SubjectKind: planes.SubjectLink, Kind: "evidence", From: "down", To: "up"}) {
		t.Error("an event other than a state change taken for a recovery")
	}
}
