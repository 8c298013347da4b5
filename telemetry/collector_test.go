package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/multiplane/multiplane/fabricsim/gnmisim"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/planes"
)

// Scaled timings: 20 ms stands for the 1 s sample interval.
const (
	tick    = 20 * time.Millisecond
	silence = 200 * time.Millisecond
)

func fastConfig() Config {
	return Config{SampleInterval: tick, SilenceTimeout: silence, ConnectTimeout: 2 * time.Second,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond}
}

type harness struct {
	rec *recorder
	col *Collector
	reg *prometheus.Registry
}

func startCollector(t *testing.T, cfg Config, topo *planes.Topology, log *slog.Logger) *harness {
	t.Helper()
	if log == nil {
		log = testenv.Logger(t)
	}
	h := &harness{rec: &recorder{}, reg: prometheus.NewRegistry()}
	col, err := New(cfg, h.rec, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := col.Register(h.reg); err != nil {
		t.Fatal(err)
	}
	h.col = col
	col.Reconcile(topo)
	ctx, cancel := context.WithCancel(testenv.Context(t))
	done := make(chan error, 1)
	go func() { done <- col.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return h
}

// startSwitch starts one emulated switch with synthetic traffic of 1e6 B/s
// per port and a topology that expects all its ports.
func startSwitch(t *testing.T, name string, ports int) (*gnmisim.Switch, *planes.Topology) {
	t.Helper()
	sw, err := gnmisim.Start(gnmisim.Config{Name: name, Source: gnmisim.Synthetic(ports, 1e6), Tick: tick, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	return sw, topologyFor(map[string]string{name: sw.Addr()}, ports)
}

// topologyFor makes a one-plane topology: each switch with ports eth1..ethN
// cabled to endpoints.
func topologyFor(addrs map[string]string, ports int) *planes.Topology {
	topo := &planes.Topology{Planes: []planes.Plane{{Name: "p0"}}}
	e := 0
	for name, addr := range addrs {
		topo.Switches = append(topo.Switches, planes.Switch{Name: name, Plane: "p0", GNMI: planes.GNMITarget{Address: addr, Insecure: true}})
		for i := range ports {
			topo.Endpoints = append(topo.Endpoints, planes.Endpoint{Name: fmt.Sprintf("ep%d", e), Ports: []planes.Port{{
				Plane: "p0", Switch: name, Interface: fmt.Sprintf("eth%d", i+1)}}})
			e++
		}
	}
	return topo
}

func (h *harness) waitRates(t *testing.T, from, n int) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("%d rate samples", n), func() bool {
		c := 0
		for _, s := range h.rec.samplesSince(from) {
			if s.Rates != nil {
				c++
			}
		}
		return c >= n
	})
}

func (h *harness) waitReach(t *testing.T, from int, what string, cond func(planes.SwitchReachability) bool) planes.SwitchReachability {
	t.Helper()
	var got planes.SwitchReachability
	testutil.WaitFor(t, 10*time.Second, what, func() bool {
		for _, r := range h.rec.reachSince(from) {
			if cond(r) {
				got = r
				return true
			}
		}
		return false
	})
	return got
}

func synced(r planes.SwitchReachability) bool    { return r.Reachable && r.Synced }
func unreached(r planes.SwitchReachability) bool { return !r.Reachable }

// checkNoFalseAlarm fails on any oper-status other than UP and any rate
// that is negative, not finite or absurd for 1e6 B/s of traffic.
func checkNoFalseAlarm(t *testing.T, samples []planes.InterfaceSample) {
	t.Helper()
	for _, s := range samples {
		if s.Oper != "" && s.Oper != planes.OperUp {
			t.Errorf("false alarm: %s %s oper-status %s", s.Switch, s.Interface, s.Oper)
		}
		if r := s.Rates; r != nil {
			for i, v := range []float64{r.InOctets, r.OutOctets, r.InPkts, r.OutPkts, r.InErrors, r.InDiscards,
				r.OutDiscards, r.InFCSErrors, r.ECNMarked, r.QueueDrops} {
				if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) || v > 1e8 {
					t.Errorf("absurd rate %d = %v in %+v", i, v, *r)
				}
			}
			if r.Interval <= 0 {
				t.Errorf("interval %v", r.Interval)
			}
		}
	}
}

func TestCollectorStreamsFromEmulatedSwitch(t *testing.T) {
	sw, topo := startSwitch(t, "sw1", 3)
	h := startCollector(t, fastConfig(), topo, nil)
	h.waitReach(t, 0, "synced", synced)
	h.waitRates(t, 0, 6)

	ups := map[string]bool{}
	for _, s := range h.rec.samplesSince(0) {
		if s.Oper == planes.OperUp {
			ups[s.Interface] = true
		}
		// 1e6 B/s; the switch's timestamps jitter a little against its source at 20 ms ticks.
		if s.Rates != nil && (s.Rates.InOctets < 2e5 || s.Rates.InOctets > 5e6) {
			t.Errorf("in-octets rate %v, want about 1e6", s.Rates.InOctets)
		}
	}
	if len(ups) != 3 {
		t.Fatalf("oper-status UP seen for %v, want eth1..eth3", ups)
	}

	// Port down: pushed at once, seen as DOWN.
	ns, _ := h.rec.mark()
	start := time.Now()
	if err := sw.SetOperStatus("eth2", "DOWN"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "eth2 DOWN", func() bool {
		for _, s := range h.rec.samplesSince(ns) {
			if s.Interface == "eth2" && s.Oper == planes.OperDown {
				return true
			}
		}
		return false
	})
	t.Logf("oper-status DOWN observed %v after it was set", time.Since(start))

	st := h.col.Switches()
	if len(st) != 1 || !st[0].Reachable || !st[0].Synced || st[0].Updates == 0 || st[0].Interfaces != 3 || st[0].LastUpdate.IsZero() {
		t.Fatalf("status %+v", st)
	}
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"multiplane_telemetry_switch_connected", "multiplane_telemetry_switch_synced",
		"multiplane_telemetry_updates_total", "multiplane_telemetry_errors_total", "multiplane_telemetry_samples_total"} {
		if !names[n] {
			t.Errorf("metric %s missing (have %v)", n, names)
		}
	}
}

func TestNoFalseAlarms(t *testing.T) {
	tests := []struct {
		name      string
		act       func(t *testing.T, sw *gnmisim.Switch)
		reconnect bool // the collector must have reconnected on its own
	}{
		{name: "counter reset", act: func(t *testing.T, sw *gnmisim.Switch) { sw.ResetCounters() }},
		{name: "counter wrap", act: func(t *testing.T, sw *gnmisim.Switch) {
			for _, c := range []gnmisim.Counter{gnmisim.InOctets, gnmisim.OutOctets, gnmisim.InPkts, gnmisim.ECNMarked} {
				if err := sw.SetCounter("eth1", c, math.MaxUint64-30_000); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{name: "counter jump", act: func(t *testing.T, sw *gnmisim.Switch) {
			if err := sw.AddCounter("eth1", gnmisim.InErrors, 1<<60); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "garbage values", act: func(t *testing.T, sw *gnmisim.Switch) {
			if err := sw.PublishGarbage("eth1"); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "switch restart", reconnect: true, act: func(t *testing.T, sw *gnmisim.Switch) {
			if err := sw.Restart(); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "stream outage of 10 intervals", reconnect: true, act: func(t *testing.T, sw *gnmisim.Switch) {
			sw.Stop()
			<-time.After(10 * tick) // the outage lasts this long (10 s at a 1 s interval)
			if err := sw.Resume(); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "stalled stream of 10 intervals", act: func(t *testing.T, sw *gnmisim.Switch) {
			sw.Stall()
			<-time.After(10 * tick) // the stall lasts this long, less than the silence timeout
			sw.Unstall()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sw, topo := startSwitch(t, "sw1", 2)
			cfg := fastConfig()
			if tt.name == "stalled stream of 10 intervals" {
				cfg.SilenceTimeout = 20 * tick
			}
			h := startCollector(t, cfg, topo, nil)
			h.waitReach(t, 0, "synced", synced)
			h.waitRates(t, 0, 4)
			ns, nr := h.rec.mark()
			tt.act(t, sw)
			// Recovery: a good number of fresh rates for both ports.
			h.waitRates(t, ns, 20)
			if tt.reconnect {
				h.waitReach(t, nr, "synced again", synced)
				if h.col.Switches()[0].Reconnects == 0 {
					t.Error("no reconnect counted")
				}
			}
			checkNoFalseAlarm(t, h.rec.samplesSince(0))
		})
	}
}

func TestStalledStreamDetected(t *testing.T) {
	sw, topo := startSwitch(t, "sw1", 2)
	h := startCollector(t, fastConfig(), topo, nil)
	h.waitReach(t, 0, "synced", synced)
	_, nr := h.rec.mark()
	sw.Stall()
	stalled := time.Now()
	r := h.waitReach(t, nr, "unreachable", unreached)
	took := time.Since(stalled)
	t.Logf("stalled stream detected after %v (silence timeout %v): %s", took, silence, r.Reason)
	if took > silence+500*time.Millisecond { // the watchdog fires at the timeout; allow for a loaded machine
		t.Errorf("detection took %v, silence timeout is %v", took, silence)
	}
	if !strings.Contains(r.Reason, "silent") {
		t.Errorf("reason %q", r.Reason)
	}
	_, nr = h.rec.mark()
	sw.Unstall()
	h.waitReach(t, nr, "synced after unstall", synced)
	checkNoFalseAlarm(t, h.rec.samplesSince(0))
}

func TestReconnectAfterTargetRestart(t *testing.T) {
	sw, topo := startSwitch(t, "sw1", 2)
	h := startCollector(t, fastConfig(), topo, nil)
	h.waitReach(t, 0, "synced", synced)
	for i := range 3 {
		_, nr := h.rec.mark()
		if err := sw.Restart(); err != nil {
			t.Fatal(err)
		}
		h.waitReach(t, nr, "down", unreached)
		h.waitReach(t, nr, fmt.Sprintf("synced after restart %d", i+1), synced)
	}
	if st := h.col.Switches()[0]; st.Reconnects < 3 {
		t.Errorf("reconnects %d", st.Reconnects)
	}
	checkNoFalseAlarm(t, h.rec.samplesSince(0))
}

func TestUnreachableTargetBacksOff(t *testing.T) {
	sw, topo := startSwitch(t, "sw1", 1)
	sw.Stop()
	h := startCollector(t, fastConfig(), topo, nil)
	r := h.waitReach(t, 0, "unreachable", unreached)
	if !strings.HasPrefix(r.Reason, "connect:") {
		t.Errorf("reason %q", r.Reason)
	}
	testutil.WaitFor(t, 5*time.Second, "a few reconnect attempts", func() bool { return h.col.Switches()[0].Reconnects >= 3 })
	if n := len(h.rec.reachSince(0)); n != 1 {
		t.Errorf("%d reachability changes while down, want 1 (no repeats)", n)
	}
	if err := sw.Resume(); err != nil {
		t.Fatal(err)
	}
	h.waitReach(t, 0, "synced after resume", synced)
}

func TestReconcile(t *testing.T) {
	f, err := gnmisim.StartFleet(gnmisim.FleetConfig{Switches: 3, Ports: 2, Tick: tick, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	addrs := map[string]string{}
	for _, sw := range f.Switches {
		addrs[sw.Name()] = sw.Addr()
	}
	sub := func(names ...string) map[string]string {
		m := map[string]string{}
		for _, n := range names {
			m[n] = addrs[n]
		}
		return m
	}
	h := startCollector(t, fastConfig(), topologyFor(sub("sw0"), 2), nil)
	names := func() []string {
		var ns []string
		for _, s := range h.col.Switches() {
			ns = append(ns, s.Switch)
		}
		return ns
	}
	waitSynced := func(n int) {
		testutil.WaitFor(t, 5*time.Second, fmt.Sprintf("%d synced switches", n), func() bool {
			c := 0
			for _, s := range h.col.Switches() {
				if s.Synced {
					c++
				}
			}
			return c == n
		})
	}
	waitSynced(1)

	h.col.Reconcile(topologyFor(sub("sw0", "sw1", "sw2"), 2))
	waitSynced(3)

	// Select narrows the streams to some of the topology's switches, a
	// switch not in it included, and nil widens them to all again.
	h.col.Select(map[string]bool{"sw1": true, "sw9": true})
	if got := names(); strings.Join(got, ",") != "sw1" {
		t.Fatalf("switches %v after Select(sw1, sw9)", got)
	}
	h.col.Select(nil)
	waitSynced(3)

	// Fewer interfaces on the same switches: no reconnect.
	h.col.Reconcile(topologyFor(sub("sw0", "sw1", "sw2"), 1))
	for _, s := range h.col.Switches() {
		if s.Interfaces != 1 || s.Reconnects != 0 || !s.Synced {
			t.Fatalf("after interface change: %+v", s)
		}
	}
	ns, _ := h.rec.mark()
	h.waitRates(t, ns, 6)
	for _, s := range h.rec.samplesSince(ns) {
		if s.Interface != "eth1" {
			t.Fatalf("sample for %s, no longer in the topology", s.Interface)
		}
	}

	// sw1 moves to a new address (a replacement switch): its stream restarts there.
	repl, _ := startSwitch(t, "sw1", 2)
	moved := sub("sw0", "sw1")
	moved["sw1"] = repl.Addr()
	h.col.Reconcile(topologyFor(moved, 1))
	if got := names(); strings.Join(got, ",") != "sw0,sw1" {
		t.Fatalf("switches %v", got)
	}
	waitSynced(2)
	if st := h.col.Switches()[1]; st.Address != repl.Addr() {
		t.Fatalf("sw1 at %s", st.Address)
	}

	h.col.Reconcile(&planes.Topology{})
	if got := names(); len(got) != 0 {
		t.Fatalf("switches %v after empty topology", got)
	}
	mfs, _ := h.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "multiplane_telemetry_switch_connected" && len(mf.GetMetric()) != 0 {
			t.Fatalf("stale per-switch series: %v", mf.GetMetric())
		}
	}
}
