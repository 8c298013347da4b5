package publish_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/kv/kvtest"
	"github.com/multiplane/multiplane/policy/publish"
)

// computations records when the publisher computed.
type computations struct {
	src *source
	mu  sync.Mutex
	at  []time.Time
}

func (c *computations) compute(ctx context.Context) (publish.Input, error) {
	c.mu.Lock()
	c.at = append(c.at, time.Now())
	c.mu.Unlock()
	return c.src.compute(ctx)
}

// since returns the computations from t on.
func (c *computations) since(t time.Time) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Time
	for _, at := range c.at {
		if !at.Before(t) {
			out = append(out, at)
		}
	}
	return out
}

// burst sends chunks of health changes (trigger), gap apart, as a plane
// failing switch by switch does; it returns when the last chunk was sent.
func burst(trigger func(), chunks, size int, gap time.Duration) time.Time {
	for i := range chunks {
		if i > 0 {
			time.Sleep(gap)
		}
		for range size {
			trigger()
		}
	}
	return time.Now()
}

// A burst of health changes coming in chunks, however small, is computed
// once, after it ends, not after every pause between chunks; TriggerNow
// (a plane going down) computes at once, in the middle of one; other
// changes (a drain) are not held.
func TestHealthBurstIsHeldUntilItEndsOrAPlaneGoesDown(t *testing.T) {
	cli := kvtest.New(t).Client
	cfg := publish.DefaultConfig()
	cfg.ID, cfg.MaxTxnOps, cfg.ParallelTxns, cfg.SessionTTL = "a", 16, 2, 2
	// Pauses between chunks (40 ms) are longer than Debounce and
	// MaxDelay, shorter than HoldQuiet, the pause that ends a large burst.
	cfg.Debounce, cfg.MaxDelay = 20*time.Millisecond, 30*time.Millisecond
	cfg.HoldQuiet, cfg.HoldMax = 300*time.Millisecond, 10*time.Second
	cfg.HoldBurst = 1 << 20 // no burst is large here
	p, c := started(t, cli, cfg)

	for _, size := range []int{100, 1} { // a plane's switches failing; a few links
		start := time.Now()
		end := burst(p.TriggerHealth, 10, size, 40*time.Millisecond)
		time.Sleep(cfg.HoldQuiet + 500*time.Millisecond)
		got := c.since(start)
		if len(got) != 1 || got[0].Before(end) {
			t.Fatalf("a burst of 10 chunks of %d over %v: %d computations at %v after it began, want 1 after it ended (%v)",
				size, end.Sub(start), len(got), offsets(got, start), end.Sub(start))
		}
	}

	// A periodic re-read (Recheck) in the middle of a burst joins it.
	begun := time.Now()
	burst(p.TriggerHealth, 3, 100, 40*time.Millisecond)
	p.Recheck()
	end := burst(p.TriggerHealth, 7, 100, 40*time.Millisecond)
	time.Sleep(cfg.HoldQuiet + 500*time.Millisecond)
	if got := c.since(begun); len(got) != 1 || got[0].Before(end) {
		t.Fatalf("a Recheck in a burst over %v: computations at %v, want 1 after it ended", end.Sub(begun), offsets(got, begun))
	}

	// An operator's change is not held.
	start := time.Now()
	p.Trigger()
	time.Sleep(cfg.MaxDelay + 100*time.Millisecond)
	if got := c.since(start); len(got) != 1 {
		t.Fatalf("a drain: %d computations in %v, want 1 within MaxDelay (%v)", len(got), cfg.MaxDelay+100*time.Millisecond, cfg.MaxDelay)
	}

	// A plane goes down in the middle of a large burst.
	start = time.Now()
	burst(p.TriggerHealth, 3, 100, 40*time.Millisecond)
	urgent := time.Now()
	p.TriggerNow()
	end = burst(p.TriggerHealth, 15, 100, 40*time.Millisecond)
	got := c.since(urgent)
	if len(got) == 0 || !got[0].Before(end) {
		t.Fatalf("TriggerNow %v into a burst: computations at %v after it began, want one before the burst ended (%v)",
			urgent.Sub(start), offsets(got, start), end.Sub(start))
	}
	if n := len(c.since(start)) - len(got); n != 0 {
		t.Fatalf("%d computations before TriggerNow in a large burst, want 0", n)
	}
}

// A burst of HoldBurst changes or more (a switch or a plane failing) is
// held past HoldMax, up to HoldBurstMax, and ends only on a pause of
// HoldBurstQuiet; a smaller one is not, and ends on a pause of HoldQuiet.
func TestLargeHealthBurstIsHeldUpToHoldBurstMax(t *testing.T) {
	cli := kvtest.New(t).Client
	cfg := publish.DefaultConfig()
	cfg.ID, cfg.MaxTxnOps, cfg.ParallelTxns, cfg.SessionTTL = "a", 16, 2, 2
	cfg.HoldQuiet, cfg.HoldMax = 200*time.Millisecond, 400*time.Millisecond
	cfg.HoldBurst, cfg.HoldBurstQuiet, cfg.HoldBurstMax = 300, 600*time.Millisecond, 5*time.Second
	p, c := started(t, cli, cfg)

	// 12 chunks 300 ms apart: 3.3 s, past HoldMax, within HoldBurstMax;
	// the pauses are longer than HoldQuiet, shorter than HoldBurstQuiet.
	for _, tc := range []struct {
		size int
		held bool
	}{{300, true}, {2, false}} {
		start := time.Now()
		end := burst(p.TriggerHealth, 12, tc.size, 300*time.Millisecond)
		time.Sleep(cfg.HoldBurstQuiet + 500*time.Millisecond)
		checkHeld(t, c, start, end, tc.held, fmt.Sprintf("a burst of 12 chunks of %d", tc.size))
	}
}

// A burst of recoveries alone (a plane's links coming back) is held past
// HoldBurstMax, up to HoldRecoverMax; a burst with failures in it is not.
func TestRecoveryBurstIsHeldUpToHoldRecoverMax(t *testing.T) {
	cli := kvtest.New(t).Client
	cfg := publish.DefaultConfig()
	cfg.ID, cfg.MaxTxnOps, cfg.ParallelTxns, cfg.SessionTTL = "a", 16, 2, 2
	cfg.HoldQuiet, cfg.HoldMax = 200*time.Millisecond, 400*time.Millisecond
	cfg.HoldBurst, cfg.HoldBurstMax, cfg.HoldRecoverMax = 300, 800*time.Millisecond, 5*time.Second
	cfg.HoldBurstQuiet = 300 * time.Millisecond
	p, c := started(t, cli, cfg)

	mixed := 0
	for _, tc := range []struct {
		name    string
		trigger func()
		held    bool
	}{
		{"recoveries", p.TriggerRecovery, true},
		{"recoveries and failures", func() {
			if mixed++; mixed%10 == 0 {
				p.TriggerHealth()
			} else {
				p.TriggerRecovery()
			}
		}, false},
	} {
		// 20 chunks 100 ms apart: 1.9 s, past HoldBurstMax, within
		// HoldRecoverMax.
		start := time.Now()
		end := burst(tc.trigger, 20, 100, 100*time.Millisecond)
		time.Sleep(cfg.HoldBurstQuiet + 500*time.Millisecond)
		checkHeld(t, c, start, end, tc.held, tc.name+" in 20 chunks")
	}
}

// started runs a publisher with cfg whose computations c records, and
// returns once it published on winning.
func started(t *testing.T, cli *clientv3.Client, cfg publish.Config) (*publish.Publisher, *computations) {
	src := &source{}
	src.set(output(3, false))
	c := &computations{src: src}
	p := publish.New(cli, cfg, testenv.Logger(t))
	waitResult(t, run(t, p, c.compute))
	return p, c
}

// checkHeld fails t unless the burst from start to end was computed once,
// after it ended (held), or more than once, beginning during it.
func checkHeld(t *testing.T, c *computations, start, end time.Time, held bool, what string) {
	t.Helper()
	got := c.since(start)
	if held && (len(got) != 1 || got[0].Before(end)) {
		t.Fatalf("%s over %v: computations at %v, want 1 after it ended", what, end.Sub(start), offsets(got, start))
	}
	if !held && (len(got) < 2 || !got[0].Before(end)) {
		t.Fatalf("%s over %v: computations at %v, want several, beginning during it", what, end.Sub(start), offsets(got, start))
	}
}

// run runs p with compute until the test ends; its publications come on
// the channel returned.
func run(t *testing.T, p *publish.Publisher, compute publish.ComputeFunc) chan publish.Result {
	results := make(chan publish.Result, 100)
	p.OnResult(func(r publish.Result) { results <- r })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx, compute); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return results
}

func offsets(ts []time.Time, from time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Sub(from).Round(time.Millisecond)
	}
	return out
}
