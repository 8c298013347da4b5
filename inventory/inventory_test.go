package inventory_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/multiplane/multiplane/inventory"
	"github.com/multiplane/multiplane/planes"
	"github.com/multiplane/multiplane/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func example(t *testing.T) *planes.Topology {
	t.Helper()
	data, err := os.ReadFile("../examples/topology.yaml")
	if err != nil {
		t.Fatal(err)
	}
	topo, err := planes.ParseTopology(data)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func TestReplaceKeepsIntentsOfKeptEndpoints(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	inv := inventory.New(db.Pool())
	if _, _, err := inv.Replace(ctx, example(t), "test"); err != nil {
		t.Fatal(err)
	}
	_, err := db.Pool().Exec(ctx, `INSERT INTO rate_classes (name, egress_bps, ingress_bps) VALUES ('gold', 1, 1);
		INSERT INTO endpoint_rate_classes (endpoint, class) VALUES ('host-a', 'gold'), ('host-h', 'gold')`)
	if err != nil {
		t.Fatal(err)
	}
	topo := example(t)
	topo.Endpoints = topo.Endpoints[:7] // host-h leaves
	topo.Endpoints[0].Ports[0].Address = netip.MustParseAddr("10.99.0.1")
	rev, changed, err := inv.Replace(ctx, topo, "test")
	if err != nil || !changed || rev != 2 {
		t.Fatalf("Replace = %d %v %v", rev, changed, err)
	}
	var classes []string
	rows, _ := db.Pool().Query(ctx, `SELECT endpoint FROM endpoint_rate_classes ORDER BY endpoint`)
	for rows.Next() {
		var e string
		rows.Scan(&e)
		classes = append(classes, e)
	}
	if len(classes) != 1 || classes[0] != "host-a" {
		t.Fatalf("rate class assignments = %v, want [host-a]", classes)
	}
	snap, err := inv.Current(ctx)
	if err != nil || snap.Revision != 2 || len(snap.Topology.Endpoints) != 7 || len(snap.Links) != 28 {
		t.Fatalf("Current = %+v, %v", snap, err)
	}
	var addr string
	db.Pool().QueryRow(ctx, `SELECT host(address) FROM endpoint_ports WHERE endpoint='host-a' AND plane='p0'`).Scan(&addr)
	if addr != "10.99.0.1" {
		t.Fatalf("address = %s", addr)
	}
}

// A topology the database refuses (here: a port cabled to a switch of
// another plane, which ParseTopology would have caught) leaves everything
// as it was.
func TestReplaceIsAllOrNothing(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	inv := inventory.New(db.Pool())
	if _, _, err := inv.Replace(ctx, example(t), "test"); err != nil {
		t.Fatal(err)
	}
	bad := example(t)
	bad.Endpoints = bad.Endpoints[:2]
	bad.Endpoints[1].Ports[0].Switch = "p1-sw1"
	if _, _, err := inv.Replace(ctx, bad, "test"); err == nil {
		t.Fatal("Replace accepted a port cabled across planes")
	}
	snap, err := inv.Current(ctx)
	if err != nil || snap.Revision != 1 || len(snap.Topology.Endpoints) != 8 {
		t.Fatalf("after failed replace: revision %d, %d endpoints, %v", snap.Revision, len(snap.Topology.Endpoints), err)
	}
	var ports int
	db.Pool().QueryRow(ctx, `SELECT count(*) FROM endpoint_ports`).Scan(&ports)
	if ports != 32 {
		t.Fatalf("endpoint_ports = %d, want 32", ports)
	}
}

// A second Inventory (another fabricd replica) sees the first one's change.
func TestCurrentFollowsOtherWriters(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	a, b := inventory.New(db.Pool()), inventory.New(db.Pool())
	if snap, _ := b.Current(ctx); snap.Revision != 0 {
		t.Fatalf("empty revision = %d", snap.Revision)
	}
	if _, _, err := a.Replace(ctx, example(t), "a"); err != nil {
		t.Fatal(err)
	}
	if snap, _ := b.Current(ctx); snap.Revision != 1 || snap.AppliedBy != "a" {
		t.Fatalf("b sees revision %d by %q", snap.Revision, snap.AppliedBy)
	}
}

// TestReplaceStoresEveryAcceptedValue: a topology with every string at its
// bound (non-ASCII included) and every number at its bound, accepted by the
// parser, is stored (no 500 from PostgreSQL), and the plaintext-password
// permission lands in its column.
func TestReplaceStoresEveryAcceptedValue(t *testing.T) {
	db := storetest.New(t)
	ctx := context.Background()
	fill := func(n int) string { return strings.Repeat("é", n/2) + strings.Repeat("x", n%2) }
	topo := &planes.Topology{
		Planes: []planes.Plane{{Name: strings.Repeat("p", 63), Description: fill(planes.MaxDescriptionLen)}},
		Switches: []planes.Switch{{Name: "s0", Plane: strings.Repeat("p", 63), GNMI: planes.GNMITarget{
			Address: strings.Repeat("h", planes.MaxGNMIAddressLen-6) + ":65535", Insecure: true,
			Username: fill(planes.MaxUsernameLen), PasswordEnv: planes.PasswordEnvPrefix + strings.Repeat("A", planes.MaxPasswordEnvLen-len(planes.PasswordEnvPrefix)),
			AllowPlaintextPassword: true}}},
		Endpoints: []planes.Endpoint{{Name: "a", Description: "rack 1\nslot 3\t(é)", Ports: []planes.Port{{
			Plane: strings.Repeat("p", 63), Address: netip.MustParseAddr("fd00::1"), Switch: "s0",
			Interface: fill(planes.MaxInterfaceLen), SpeedBps: planes.MaxSpeedBps}}}},
	}
	doc, err := json.Marshal(topo)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := planes.ParseTopology(doc)
	if err != nil {
		t.Fatalf("bounds not accepted: %v", err)
	}
	inv := inventory.New(db.Pool())
	if _, _, err := inv.Replace(ctx, parsed, "test"); err != nil {
		t.Fatalf("accepted topology not stored: %v", err)
	}
	var allow bool
	if err := db.Pool().QueryRow(ctx, `SELECT gnmi_allow_plaintext_password FROM switches WHERE name = 's0'`).Scan(&allow); err != nil || !allow {
		t.Fatalf("gnmi_allow_plaintext_password = %v, %v; want true", allow, err)
	}
	snap, err := inv.Current(ctx)
	if err != nil || !snap.Topology.Switches[0].GNMI.AllowPlaintextPassword || snap.Topology.Endpoints[0].Ports[0].SpeedBps != planes.MaxSpeedBps {
		t.Fatalf("Current = %+v, %v", snap, err)
	}
}
