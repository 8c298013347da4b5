package planes

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// A replica that does not collect a switch shows what the owner's engine
// judged, after a JSON round trip as through etcd: the same link, switch
// and plane states, transitions on its own bus, the plane's traffic.
func TestRemoteSwitchMirrorsItsOwner(t *testing.T) {
	owner, mirror := newHarness(t, nil), newHarness(t, nil)
	mirror.e.SetOwners("b", map[string]string{"s0": "a", "s1": "b"})
	sync := func() {
		t.Helper()
		v, ok := owner.e.ExportSwitch("s0")
		if !ok {
			t.Fatal("s0 not exported")
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var got SwitchView
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if !mirror.e.ImportSwitch(got) {
			t.Fatal("s0 not imported")
		}
	}
	for i := range 5 {
		owner.oper("s0", fmt.Sprintf("E%d", i), OperDown)
	}
	owner.rates("s0", "E6", InterfaceRates{InOctets: 5, OutOctets: 10, InPkts: 100, OutPkts: 100, OutDiscards: 2})
	sync()
	for _, name := range []string{"s0:E0", "s0:E4", "s0:E5", "s0:E6"} {
		o, _ := owner.e.LinkHealth(name)
		m, _ := mirror.e.LinkHealth(name)
		if o.State != m.State || o.Reason != m.Reason || o.Oper != m.Oper {
			t.Errorf("link %s: owner %s %q %s, mirror %s %q %s", name, o.State, o.Reason, o.Oper, m.State, m.Reason, m.Oper)
		}
	}
	o, _ := owner.e.PlaneHealth("p0")
	m, _ := mirror.e.PlaneHealth("p0")
	if !reflect.DeepEqual(o, m) {
		t.Errorf("plane p0: owner %+v\nmirror %+v", o, m)
	}
	if m.State != PlaneDown || m.Utilization == 0 || m.LossRate == 0 {
		t.Errorf("mirror's p0 = %+v, want down with the owner's traffic figures", m)
	}
	os, _ := owner.e.SwitchHealth("s0")
	ms, _ := mirror.e.SwitchHealth("s0")
	if os.State != ms.State || os.Reason != ms.Reason || os.Reachable != ms.Reachable || ms.CollectedBy != "a" {
		t.Errorf("switch s0: owner %+v, mirror %+v", os, ms)
	}
	got := mirror.events()
	if len(got) != 7 || got[5] != "switch s0 healthy->degraded" || got[6] != "plane p0 healthy->down" {
		t.Errorf("mirror's events: %q", got)
	}

	// The mirror does not judge a remote switch from telemetry.
	mirror.oper("s0", "E7", OperDown)
	mirror.e.ObserveSwitch(SwitchReachability{Switch: "s0", Reachable: false, Reason: "stream down"})
	mirror.clock.Advance(DefaultHealthConfig().UnreachableHold * 2)
	mirror.e.Tick()
	mirror.expectLink("s0:E7", LinkUp)
	if sh, _ := mirror.e.SwitchHealth("s0"); !sh.Reachable {
		t.Error("a remote switch's reachability came from the mirror's stream")
	}
	mirror.expectEvents()

	// Once local, the telemetry kept is judged at once.
	mirror.e.SetOwners("b", map[string]string{"s0": "b", "s1": "b"})
	mirror.expectLink("s0:E7", LinkDown)
	mirror.expectEvents("link s0:E7 up->down")

	// A local switch is not imported.
	if mirror.e.ImportSwitch(SwitchView{Switch: "s0", Links: []LinkView{{Interface: "E7", State: LinkUp}}}) {
		t.Error("a local switch was imported")
	}
	mirror.expectLink("s0:E7", LinkDown)
}
