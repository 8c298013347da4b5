package bench

import (
	"testing"
	"time"
)

func TestRateFlags(t *testing.T) {
	for in, want := range map[string]float64{"300M": 300e6, "1.5G": 1.5e9, "800k": 800e3, "42": 42, "0": 0} {
		var r rate
		if err := r.Set(in); err != nil || float64(r) != want {
			t.Errorf("rate %q: %v, %v; want %v", in, float64(r), err, want)
		}
	}
	for _, in := range []string{"", "M", "-5M", "fast", "1e20"} {
		var r rate
		if err := r.Set(in); err == nil {
			t.Errorf("rate %q accepted as %v", in, float64(r))
		}
	}
	var s rateStep
	if err := s.Set("3s:150M"); err != nil || s.After != 3*time.Second || s.Bps != 150e6 {
		t.Errorf("step 3s:150M: %+v, %v", s, err)
	}
	for _, in := range []string{"3s", ":100M", "0s:100M", "-1s:100M", "2s:x"} {
		var s rateStep
		if err := s.Set(in); err == nil {
			t.Errorf("step %q accepted as %+v", in, s)
		}
	}
}

func TestEgressCapFlagsValidated(t *testing.T) {
	base := Config{Role: RoleClient, Mode: ModeMultipath, Bind: lo(1), Peer: lo(1), Port: 1, Size: 1024, Conns: 1, Duration: 4 * time.Second}
	for name, bad := range map[string]func(c *Config){
		"cap on tcp":             func(c *Config) { c.Mode, c.EgressCap = ModeTCP, 1e6 },
		"cap on the server":      func(c *Config) { c.Role, c.EgressCap = RoleServer, 1e6 },
		"step after the run":     func(c *Config) { c.EgressStep = RateStep{After: 5 * time.Second, Bps: 1e6} },
		"series on a tcp client": func(c *Config) { c.Mode, c.Series = ModeTCP, 10*time.Millisecond },
		"series on a lat client": func(c *Config) { c.Latency, c.Series = true, 10*time.Millisecond },
		"budget on a client":     func(c *Config) { c.IngressBudget = 1e6 },
		"budget on a tcp server": func(c *Config) { c.Role, c.Mode, c.IngressBudget = RoleServer, ModeTCP, 1e6 },
		"series too fine":        func(c *Config) { c.Role, c.Series = RoleServer, time.Microsecond },
	} {
		c := base
		bad(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	ok := base
	ok.EgressCap, ok.EgressStep = 600e6, RateStep{After: 2 * time.Second, Bps: 300e6}
	ok.Series = 10 * time.Millisecond
	if err := ok.Validate(); err != nil {
		t.Errorf("a cap and a step within the run: %v", err)
	}
}

// Settle: jitter that moves bytes into the next bucket conforms, a rate
// over the limit does not, and a change shows from the bucket it starts.
func TestSeriesSettle(t *testing.T) {
	ms := int64(time.Millisecond)
	s := &Series{WidthSeconds: 0.01, StartUnixNs: 1000 * ms,
		Bps: []float64{200, 200, 200, 100, 80, 120, 100, 90, 110, 100}}
	end := s.StartUnixNs + 100*ms
	if d, ok := s.Settle(s.StartUnixNs+25*ms, end, 100, 0); !ok || d != 5*time.Millisecond {
		t.Errorf("step at 25 ms: settled %v %v, want 5ms", d, ok)
	}
	if d, ok := s.Settle(s.StartUnixNs, end, 100, 0); !ok || d != 30*time.Millisecond {
		t.Errorf("from the start: settled %v %v, want 30ms", d, ok)
	}
	over := &Series{WidthSeconds: 0.01, StartUnixNs: s.StartUnixNs, Bps: []float64{100, 105, 105, 105, 105, 105, 105}}
	if d, ok := over.Settle(over.StartUnixNs, over.StartUnixNs+70*ms, 100, 0); ok {
		t.Errorf("5%% over the limit throughout conformed from %v", d)
	}
	// A sender at its rate whose pacer saved 1.5 ms of it while it was not
	// scheduled conforms from the first bucket when the check allows the
	// pacer's burst, and not before.
	saved := &Series{WidthSeconds: 0.01, StartUnixNs: s.StartUnixNs, Bps: []float64{115, 100, 100, 100}}
	if d, ok := saved.Settle(saved.StartUnixNs, saved.StartUnixNs+40*ms, 100, 1500*time.Microsecond); !ok || d != 0 {
		t.Errorf("a pacer's saved burst: settled %v %v, want 0", d, ok)
	}
	if d, ok := saved.Settle(saved.StartUnixNs, saved.StartUnixNs+40*ms, 100, 0); !ok || d != 10*time.Millisecond {
		t.Errorf("no burst allowed: settled %v %v, want 10ms", d, ok)
	}
	// A receiver that stalled for 30 ms and then took in what waited
	// conforms when the check allows 20 ms of lateness (one bucket is
	// always saved), and not with less.
	stalled := &Series{WidthSeconds: 0.01, StartUnixNs: s.StartUnixNs, Bps: []float64{100, 0, 0, 0, 400, 100, 100}}
	if d, ok := stalled.SettleLate(stalled.StartUnixNs, stalled.StartUnixNs+70*ms, 100, 0, 20*time.Millisecond); !ok || d != 0 {
		t.Errorf("a receiver's stall and catch-up: settled %v %v, want 0", d, ok)
	}
	if d, ok := stalled.SettleLate(stalled.StartUnixNs, stalled.StartUnixNs+70*ms, 100, 0, 10*time.Millisecond); !ok || d != 50*time.Millisecond {
		t.Errorf("a 30 ms stall judged with 10 ms of lateness: settled %v %v, want 50ms", d, ok)
	}
	if d, ok := over.SettleLate(over.StartUnixNs, over.StartUnixNs+70*ms, 100, 0, 20*time.Millisecond); ok {
		t.Errorf("5%% over the limit for longer than the lateness conformed from %v", d)
	}
	if m := s.Mean(s.StartUnixNs+30*ms, end); m != 100 {
		t.Errorf("mean %v, want 100", m)
	}
}
