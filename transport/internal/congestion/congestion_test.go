package congestion

import (
	"testing"
	"time"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.t = c.t.Add(d) }

const mss = 1446

// drive runs n packets through the controller with the given RTT, losing
// every lossEvery-th packet (0: none), and returns the final window.
func drive(t *testing.T, c *DelayAIMD, rtt *RTTStats, clk *fakeClock, n int, sample time.Duration, lossEvery int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		clk.Advance(10 * time.Microsecond)
		if lossEvery > 0 && i%lossEvery == 0 {
			c.OnPacketLost(clk.Now(), mss, c.CongestionWindow())
			continue
		}
		rtt.Update(clk.Now(), sample, 0)
		c.OnPacketAcked(clk.Now(), mss, c.CongestionWindow())
	}
}

func TestDelayAIMD(t *testing.T) {
	newC := func() (*DelayAIMD, *RTTStats, *fakeClock) {
		rtt := NewRTTStats()
		return NewDelayAIMD(DefaultDelayAIMDConfig(mss), rtt), rtt, &fakeClock{t: time.Unix(1000, 0)}
	}
	t.Run("grows without congestion", func(t *testing.T) {
		c, rtt, clk := newC()
		w0 := c.CongestionWindow()
		drive(t, c, rtt, clk, 2000, 200*time.Microsecond, 0)
		if c.CongestionWindow() <= w0 {
			t.Fatalf("window %d did not grow from %d", c.CongestionWindow(), w0)
		}
	})
	t.Run("random loss does not shrink", func(t *testing.T) {
		c, rtt, clk := newC()
		drive(t, c, rtt, clk, 500, 200*time.Microsecond, 0)
		w0 := c.CongestionWindow()
		drive(t, c, rtt, clk, 5000, 200*time.Microsecond, 100) // 1% loss, no delay
		if w := c.CongestionWindow(); w < w0 {
			t.Fatalf("window shrank under random loss: %d -> %d", w0, w)
		}
	})
	t.Run("random loss near the delay target adds no cuts", func(t *testing.T) {
		// Same RTTs, with and without 1% loss: the delay rule alone sets
		// the window; losses must not pile multiplicative cuts on top.
		run := func(lossEvery int) protocol.ByteCount {
			c, rtt, clk := newC()
			drive(t, c, rtt, clk, 500, 200*time.Microsecond, 0)
			for i := 0; i < 30; i++ {
				sample := 1100 * time.Microsecond
				if i%2 == 1 {
					sample = 1500 * time.Microsecond // above the target
				}
				drive(t, c, rtt, clk, 200, sample, lossEvery)
			}
			return c.CongestionWindow()
		}
		clean, lossy := run(0), run(100)
		t.Logf("clean %d lossy %d", clean, lossy)
		if lossy < clean*8/10 {
			t.Fatalf("window with 1%% loss %d, without %d", lossy, clean)
		}
	})
	t.Run("delay shrinks", func(t *testing.T) {
		c, rtt, clk := newC()
		drive(t, c, rtt, clk, 500, 200*time.Microsecond, 0)
		w0 := c.CongestionWindow()
		drive(t, c, rtt, clk, 2000, 5*time.Millisecond, 0)
		if w := c.CongestionWindow(); w >= w0 {
			t.Fatalf("window did not shrink on delay: %d -> %d", w0, w)
		}
	})
	t.Run("loss with delay shrinks once per round", func(t *testing.T) {
		c, rtt, clk := newC()
		drive(t, c, rtt, clk, 50, 200*time.Microsecond, 0)
		for range 10 {
			clk.Advance(time.Millisecond)
			rtt.Update(clk.Now(), 5*time.Millisecond, 0)
		}
		w0 := c.CongestionWindow()
		c.OnPacketLost(clk.Now(), mss, w0)
		w1 := c.CongestionWindow()
		c.OnPacketLost(clk.Now(), mss, w1)
		if w1 >= w0 || c.CongestionWindow() != w1 {
			t.Fatalf("windows %d %d %d", w0, w1, c.CongestionWindow())
		}
	})
	t.Run("ecn", func(t *testing.T) {
		c, rtt, clk := newC()
		drive(t, c, rtt, clk, 200, 200*time.Microsecond, 0)
		clk.Advance(time.Millisecond)
		w0 := c.CongestionWindow()
		c.OnECN(clk.Now(), 1)
		c.OnECN(clk.Now(), 1)
		if got := c.CongestionWindow(); got != protocol.ByteCount(float64(w0)*0.8) {
			t.Fatalf("window after ECN %d, want 0.8×%d", got, w0)
		}
	})
	t.Run("rto", func(t *testing.T) {
		c, _, clk := newC()
		c.OnRetransmissionTimeout(clk.Now())
		if c.CongestionWindow() != 2*mss || c.CanSend(2*mss) || !c.CanSend(0) {
			t.Fatalf("window after RTO %d", c.CongestionWindow())
		}
	})
}

func TestRTTStats(t *testing.T) {
	r := NewRTTStats()
	if r.RTO() != DefaultMinRTO {
		t.Fatalf("initial RTO %v", r.RTO())
	}
	now := time.Unix(0, 0)
	for range 20 {
		r.Update(now, 10*time.Millisecond, 0)
	}
	if r.Smoothed() != 10*time.Millisecond || r.Min() != 10*time.Millisecond {
		t.Fatalf("smoothed %v min %v", r.Smoothed(), r.Min())
	}
	if rto := r.RTO(); rto < 10*time.Millisecond || rto > 20*time.Millisecond {
		t.Fatalf("RTO %v", rto)
	}
	// 5 ms of a 12 ms sample were spent in the endpoints: the fabric
	// signal (latest, min) drops to 7 ms, the smoothed RTT takes it whole.
	r.Update(now, 12*time.Millisecond, 5*time.Millisecond)
	if r.Latest() != 7*time.Millisecond || r.Min() != 7*time.Millisecond || r.RoundMin() != 7*time.Millisecond {
		t.Fatalf("latest %v min %v round min %v, want 7ms", r.Latest(), r.Min(), r.RoundMin())
	}
	if want := (7*10*time.Millisecond + 12*time.Millisecond) / 8; r.Smoothed() != want {
		t.Fatalf("smoothed %v, want %v", r.Smoothed(), want)
	}
	// An endpoint delay as large as the sample (clocks disagree) is ignored.
	r.Update(now, 9*time.Millisecond, 9*time.Millisecond)
	if r.Latest() != 9*time.Millisecond || r.Min() != 7*time.Millisecond {
		t.Fatalf("latest %v min %v", r.Latest(), r.Min())
	}
}

func TestRTOFloorFollowsRecentMax(t *testing.T) {
	r := NewRTTStats()
	now := time.Unix(100, 0)
	for range 50 {
		r.Update(now, time.Millisecond, 0)
	}
	if r.RTO() != DefaultMinRTO {
		t.Fatalf("RTO %v", r.RTO())
	}
	// A 20 ms stall seen once lifts the RTO above it for one to two windows.
	r.UpdateMax(now, 20*time.Millisecond)
	if r.RTO() != 25*time.Millisecond {
		t.Fatalf("RTO after a stall %v", r.RTO())
	}
	now = now.Add(1500 * time.Millisecond)
	r.Update(now, time.Millisecond, 0)
	if r.RTO() != 25*time.Millisecond {
		t.Fatalf("RTO in the next window %v", r.RTO())
	}
	now = now.Add(2500 * time.Millisecond)
	r.Update(now, time.Millisecond, 0)
	if r.RTO() != DefaultMinRTO {
		t.Fatalf("RTO after the stall aged out %v", r.RTO())
	}
}

func TestPacer(t *testing.T) {
	clk := &fakeClock{t: time.Unix(0, 0)}
	p := NewPacer(3000)
	rate := 100 * protocol.Mbps // 12.5 MB/s
	if b := p.Budget(clk.Now(), rate); b != 3000 {
		t.Fatalf("initial budget %d", b)
	}
	p.OnSent(3000)
	if d := p.TimeUntil(clk.Now(), rate, 1250); d != 100*time.Microsecond {
		t.Fatalf("TimeUntil %v", d)
	}
	clk.Advance(100 * time.Microsecond)
	if b := p.Budget(clk.Now(), rate); b != 1250 {
		t.Fatalf("budget %d", b)
	}
	clk.Advance(time.Second)
	if b := p.Budget(clk.Now(), rate); b != 3000 {
		t.Fatalf("budget not capped: %d", b)
	}
	// Sending a total over one simulated second matches the rate.
	var sent protocol.ByteCount
	p = NewPacer(3000)
	start := clk.Now()
	for clk.Now().Sub(start) < time.Second {
		for p.Budget(clk.Now(), rate) >= 1000 {
			p.OnSent(1000)
			sent += 1000
		}
		clk.Advance(p.TimeUntil(clk.Now(), rate, 1000))
	}
	if sent < 12_400_000 || sent > 12_600_000 {
		t.Fatalf("paced %d bytes in 1s at %v", sent, rate)
	}
}

// Pacing spreads a window over the smoothed RTT, but over at most the
// fabric's share plus HostDelay: a host slow to acknowledge (here 20 ms of
// each 20.1 ms sample) must not pace the path at a twentieth of what the
// fabric carries, and with hosts that answer at once the pace is the whole
// RTT's (no window-sized bursts).
func TestPacingIgnoresSlowHosts(t *testing.T) {
	for _, tc := range []struct {
		name            string
		sample, host    time.Duration
		wantRTT         time.Duration // the window goes out over this
		wantFabric, tol time.Duration
	}{
		{"slow host", 20100 * time.Microsecond, 20 * time.Millisecond, 1100 * time.Microsecond, 100 * time.Microsecond, 10 * time.Microsecond},
		{"prompt host", 600 * time.Microsecond, 500 * time.Microsecond, 600 * time.Microsecond, 100 * time.Microsecond, 10 * time.Microsecond},
	} {
		rtt := NewRTTStats()
		cc := NewDelayAIMD(DefaultDelayAIMDConfig(1000), rtt)
		now := time.Unix(0, 0)
		for i := range 50 {
			rtt.Update(now.Add(time.Duration(i)*time.Millisecond), tc.sample, tc.host)
		}
		if got := rtt.FabricSmoothed(); got < tc.wantFabric-tc.tol || got > tc.wantFabric+tc.tol {
			t.Fatalf("%s: fabric smoothed RTT %v, want about %v", tc.name, got, tc.wantFabric)
		}
		if got := rtt.Smoothed(); got < tc.sample*9/10 {
			t.Fatalf("%s: whole smoothed RTT %v, want about %v (the RTO bounds the hosts' delay)", tc.name, got, tc.sample)
		}
		gain := 2.0 // slow start
		spread := time.Duration(gain * float64(cc.CongestionWindow()) / float64(cc.PacingRate()) * 1e9)
		if spread < tc.wantRTT*95/100 || spread > tc.wantRTT*105/100 {
			t.Errorf("%s: a window goes out over %v, want %v", tc.name, spread, tc.wantRTT)
		}
	}
}
