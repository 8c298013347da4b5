package transport

import (
	"testing"
	"time"

	"github.com/multiplane/multiplane/internal/testenv"
)

func TestDebugGBN(t *testing.T) {
	ctx := testenv.Context(t)
	a := listenT(t, Config{Local: loopbackAddrs(4), Mode: ModeGBN})
	b := listenT(t, Config{Local: loopbackAddrs(4)})
	ca, cb := pair(t, ctx, a, b, b.LocalAddrs())
	done := make(chan struct{})
	go func() {
		defer close(done)
		transfer(t, ctx, ca, cb, 200, 64<<10, 4)
	}()
	for i := 0; i < 10; i++ {
		select {
		case <-done:
			return
		case <-time.After(300 * time.Millisecond):
		}
		ca.mu.Lock()
		p := ca.active[0]
		t.Logf("sender: queued %d sendQ %d gbnQ %d/%d inflight %d next %d sentNew %d peerMax %d msgs %d cwnd %d rto %v",
			ca.queued, len(ca.sendQ), ca.gbnHead, len(ca.gbnQ), p.sent.BytesInFlight(), p.sent.NextPacketNumber(), ca.sentNew, ca.peerMaxData, len(ca.sendMsgs), p.sent.CC.CongestionWindow(), p.sent.RTODeadline())
		ca.mu.Unlock()
		cb.mu.Lock()
		for id, rp := range cb.rpaths {
			t.Logf("recv path %d expected %d rx %d", id, rp.inorder.Expected, rp.rxPkts)
		}
		cb.mu.Unlock()
	}
	t.Fatal("stuck")
}
