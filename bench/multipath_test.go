package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/multiplane/multiplane/fabricsim/userspace"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
)

// TestTransportModesOverUserspaceFabric runs the bench in modes multipath
// and gbn through the userspace fabric (4 planes × 100 Mbit/s), every
// message verified.
func TestTransportModesOverUserspaceFabric(t *testing.T) {
	for _, tc := range []struct {
		mode          Mode
		loss, reorder float64
	}{
		{ModeMultipath, 0, 0},
		{ModeMultipath, 0.01, 0.01},
		{ModeGBN, 0, 0},
	} {
		t.Run(fmt.Sprintf("%s-loss%g-reorder%g", tc.mode, tc.loss, tc.reorder), func(t *testing.T) {
			const planes = 4
			pcs := make([]userspace.PlaneConfig, planes)
			for i := range pcs {
				pcs[i] = userspace.PlaneConfig{RateBps: 100e6, Loss: tc.loss, Reorder: tc.reorder, Seed: int64(i)}
			}
			ctx, cancel := context.WithTimeout(testenv.Context(t), 60*time.Second)
			defer cancel()
			f, err := userspace.Start(ctx, userspace.Config{Hosts: 2, Planes: pcs, Port: testutil.FabricPort(t, 2, planes), Logger: testenv.Logger(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			var srvBind, cliBind, peer []netip.Addr
			for p := range planes {
				srvBind = append(srvBind, f.LocalAddr(1, p))
				cliBind = append(cliBind, f.LocalAddr(0, p))
				peer = append(peer, f.PeerAddr(1, p).Addr())
			}
			base := Config{Mode: tc.mode, Port: f.Port(), Size: 65536, Duration: time.Second, Conns: 1,
				ConnectTimeout: 5 * time.Second, Interval: 250 * time.Millisecond, MTU: 1500}
			scfg, ccfg := base, base
			scfg.Role, scfg.Bind, scfg.Timeout = RoleServer, srvBind, 50*time.Second
			ccfg.Role, ccfg.Bind, ccfg.Peer = RoleClient, cliBind, peer
			type res struct {
				r   Result
				err error
			}
			done := make(chan res, 1)
			go func() {
				r, err := Run(ctx, scfg, &bytes.Buffer{}, &bytes.Buffer{})
				done <- res{r, err}
			}()
			var out, errb bytes.Buffer
			cli, cerr := Run(ctx, ccfg, &out, &errb)
			srv := <-done
			if cerr != nil || srv.err != nil {
				t.Fatalf("client: %v, server: %v\n%s%s", cerr, srv.err, out.String(), errb.String())
			}
			if cli.Messages == 0 || cli.Messages != srv.r.Messages || cli.Errors != 0 {
				t.Fatalf("client %+v server %+v", cli, srv.r)
			}
			t.Logf("%s: %.1f Mbit/s over the relay, retransmits %v, per plane %v", tc.mode, cli.GoodputBps/1e6, deref(cli.Retransmits), cli.PerPlaneBytes)
			for p := range planes {
				st := f.Stats(p)
				t.Logf("plane %d: drops %+v ecn %d", p, st.Drops, st.ECNMarked)
			}
		})
	}
}

func deref(p *int64) any {
	if p == nil {
		return "unknown"
	}
	return *p
}

// TestWindowForBoundsMemory: the send slots of all connections together
// stay near inflightBudget (or one message per connection), whatever -q.
func TestWindowForBoundsMemory(t *testing.T) {
	for _, tc := range []struct{ conns, size, want int }{
		{1, 65536, maxWindow},
		{64, 65536, maxWindow},
		{1024, 65536, 4},
		{8192, 65536, 1},
		{8192, 64, maxWindow},
		{1, 16 << 20, 2},
	} {
		got := windowFor(tc.conns, tc.size)
		if got != tc.want {
			t.Errorf("windowFor(%d, %d) = %d, want %d", tc.conns, tc.size, got, tc.want)
		}
		if mem := tc.conns * got * tc.size; mem > max(inflightBudget, tc.conns*tc.size) {
			t.Errorf("-q %d -s %d: %d MiB of send slots", tc.conns, tc.size, mem>>20)
		}
	}
}
