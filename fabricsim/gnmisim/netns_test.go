package gnmisim

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	pb "github.com/openconfig/gnmi/proto/gnmi"

	"github.com/multiplane/multiplane/fabricsim/netns"
	"github.com/multiplane/multiplane/internal/testenv"
)

// TestNetnsBridgeSource serves a namespace fabric's bridge ports: real
// traffic shows in the counters and a host link going down shows in
// oper-status.
func TestNetnsBridgeSource(t *testing.T) {
	testenv.RequireNetns(t)
	for _, c := range []string{"tc", "nft", "ethtool", "sysctl", "ping"} {
		testenv.RequireCommand(t, c)
	}
	ctx, cancel := context.WithTimeout(testenv.Context(t), 2*time.Minute)
	defer cancel()
	f, err := netns.Start(ctx, netns.Config{Name: fmt.Sprintf("mpgs-%d", os.Getpid()), Hosts: 2,
		Planes: []netns.PlaneConfig{{}}, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	devs := []string{f.SwitchPort(0, 0), f.SwitchPort(1, 0)}
	src := NetnsBridge(f.SwitchNS(0), devs)

	before, err := src.Ports(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 2 || before[0].OperStatus != "UP" || before[1].OperStatus != "UP" {
		t.Fatalf("ports %+v", before)
	}
	if out, err := f.Exec(ctx, 0, "ping", "-c", "3", "-i", "0.05", "-W", "1", f.Addr(1, 0).String()); err != nil {
		t.Fatalf("ping: %v: %s", err, out)
	}
	after, _ := src.Ports(nil)
	if after[0].Counters.InPkts < before[0].Counters.InPkts+3 || after[0].Counters.InOctets <= before[0].Counters.InOctets {
		t.Fatalf("traffic not counted: before %+v after %+v", before[0].Counters, after[0].Counters)
	}

	sw, err := Start(Config{Name: "p0", Source: src, Tick: 100 * time.Millisecond, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	if err := f.SetLinkUp(ctx, 1, 0, false); err != nil {
		t.Fatal(err)
	}
	c := dial(t, sw.Addr())
	collect(t, c, "p0", []*pb.Path{wild("interfaces", "interface[name]", "state", "oper-status")}, func(got []leaf, synced bool) bool {
		for _, l := range got {
			if l.path == "/interfaces/interface[name="+devs[1]+"]/state/oper-status" && l.val.GetStringVal() != "UP" {
				t.Logf("%s oper-status %s", devs[1], l.val.GetStringVal())
				return true
			}
		}
		return false
	})
}
