package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/multiplane/multiplane/fabricsim/gnmisim"
	"github.com/multiplane/multiplane/internal/fabricdproc"
)

// TelemetryConfig sizes the telemetry benchmark.
type TelemetryConfig struct {
	FabricdBin string
	WorkDir    string // fabricd's data directory lives here
	Switches   int
	Ports      int
	Planes     int
	Sample     time.Duration // gNMI sample interval and switch tick
	Failures   int           // injected port failures
	UpHold     time.Duration // fabricd --health-up-hold, so restores are quick
	Ingest     time.Duration // window of the ingest measurement
	Soak       time.Duration // memory soak
}

// DefaultTelemetryConfig is the setup: 64 switches × 64 ports at 1 s.
func DefaultTelemetryConfig() TelemetryConfig {
	return TelemetryConfig{FabricdBin: "bin/fabricd", Switches: 64, Ports: 64, Planes: 4, Sample: time.Second,
		Failures: 100, UpHold: 200 * time.Millisecond, Ingest: 30 * time.Second, Soak: 5 * time.Minute}
}

// TelemetryResult are the measured figures.
type TelemetryResult struct {
	Config  TelemetryConfig
	Detect  Quantiles // port DOWN at the switch → plane state change seen on the API stream
	Restore Quantiles // port UP → plane healthy again (includes UpHold)
	Missed  int       // failures with no plane change within 5 s
	// InternalP50 and InternalP99 are from fabricd's own detection
	// histogram: oper-status timestamp at the switch → plane state change.
	InternalP50, InternalP99 time.Duration
	UpdatesPerSec            float64 // leaf updates fabricd took in, steady state
	CPUCores                 float64 // fabricd's CPU use in the same window
	UpdatesPerCPUSec         float64
	RSSStart, RSSEnd         int64 // fabricd resident memory at the start and end of the soak
	HeapStart, HeapEnd       float64
	RSSSamples               []int64
	FalseDowns               int // links that went down without an injected failure
}

// RunTelemetry runs the fleet, fabricd, the failures, the ingest window and
// the soak, in that order.
func RunTelemetry(ctx context.Context, cfg TelemetryConfig, logger *slog.Logger) (*TelemetryResult, error) {
	res := &TelemetryResult{Config: cfg}
	sys, err := startSystem(ctx, gnmisim.FleetConfig{Switches: cfg.Switches, Ports: cfg.Ports, Planes: cfg.Planes,
		Tick: cfg.Sample, Logger: logger.With("component", "gnmisim")}, cfg.FabricdBin, cfg.WorkDir, "fabricd-telemetry",
		"--health-up-hold", cfg.UpHold.String())
	if err != nil {
		return nil, err
	}
	defer sys.close()
	fleet, topo, fd := sys.fleet, sys.topo, sys.fd
	logger.Info("fabricd started", "pid", fd.Pid(), "switches", cfg.Switches, "ports", cfg.Ports)

	if err := waitSynced(ctx, fd, cfg.Switches, 2*time.Minute); err != nil {
		return nil, err
	}
	events, err := streamEvents(ctx, fd)
	if err != nil {
		return nil, err
	}
	planeOf := map[string]string{}
	for _, s := range topo.Switches {
		planeOf[s.Name] = s.Plane
	}

	// Failures: one port at a time, DOWN then UP.
	var detect, restore []time.Duration
	downs := map[string]bool{}
	for i := 0; i < cfg.Failures && ctx.Err() == nil; i++ {
		sw := fleet.Switches[i%len(fleet.Switches)]
		port := fmt.Sprintf("eth%d", (i/len(fleet.Switches))%cfg.Ports+1)
		plane := planeOf[sw.Name()]
		link := sw.Name() + ":" + port
		t0 := time.Now()
		if err := sw.SetOperStatus(port, "DOWN"); err != nil {
			return nil, err
		}
		ok := waitEvent(ctx, events, 5*time.Second, downs, link, func(e sseEvent) bool {
			return e.SubjectKind == "plane" && e.Subject == plane && e.To == "degraded"
		})
		if ok.IsZero() {
			res.Missed++
		} else {
			detect = append(detect, ok.Sub(t0))
		}
		t1 := time.Now()
		if err := sw.SetOperStatus(port, "UP"); err != nil {
			return nil, err
		}
		ok = waitEvent(ctx, events, 5*time.Second+cfg.UpHold, downs, link, func(e sseEvent) bool {
			return e.SubjectKind == "plane" && e.Subject == plane && e.To == "healthy"
		})
		if !ok.IsZero() {
			restore = append(restore, ok.Sub(t1))
		}
	}
	res.Detect, res.Restore = quantiles(detect), quantiles(restore)
	if v, err := histogramQuantile(ctx, fd, "multiplane_planes_detection_latency_seconds", 0.5); err == nil {
		res.InternalP50 = time.Duration(v * float64(time.Second))
	}
	if v, err := histogramQuantile(ctx, fd, "multiplane_planes_detection_latency_seconds", 0.99); err == nil {
		res.InternalP99 = time.Duration(v * float64(time.Second))
	}
	logger.Info("failures done", "detect_p50", res.Detect.P50, "detect_p99", res.Detect.P99, "missed", res.Missed)

	// Ingest, steady state.
	u0, err := metric(ctx, fd, "multiplane_telemetry_updates_total")
	if err != nil {
		return nil, err
	}
	c0, _ := cpuSeconds(fd.Pid())
	start := time.Now()
	sleep(ctx, cfg.Ingest)
	u1, _ := metric(ctx, fd, "multiplane_telemetry_updates_total")
	c1, _ := cpuSeconds(fd.Pid())
	el := time.Since(start).Seconds()
	res.UpdatesPerSec = (u1 - u0) / el
	res.CPUCores = (c1 - c0) / el
	if c1 > c0 {
		res.UpdatesPerCPUSec = (u1 - u0) / (c1 - c0)
	}
	logger.Info("ingest", "updates_per_s", res.UpdatesPerSec, "cpu_cores", res.CPUCores)

	// Soak: memory over time, and no link may go down on its own.
	res.RSSStart, _ = rssBytes(fd.Pid())
	res.HeapStart, _ = metric(ctx, fd, "go_memstats_heap_inuse_bytes")
	soakEnd := time.Now().Add(cfg.Soak)
	for time.Now().Before(soakEnd) && ctx.Err() == nil {
		if rss, err := rssBytes(fd.Pid()); err == nil {
			res.RSSSamples = append(res.RSSSamples, rss)
		}
		drainFalseDowns(events, downs, &res.FalseDowns)
		sleep(ctx, min(10*time.Second, time.Until(soakEnd)))
	}
	drainFalseDowns(events, downs, &res.FalseDowns)
	res.RSSEnd, _ = rssBytes(fd.Pid())
	res.HeapEnd, _ = metric(ctx, fd, "go_memstats_heap_inuse_bytes")
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// waitSynced waits until fabricd reports every switch reachable.
func waitSynced(ctx context.Context, fd *fabricdproc.Proc, switches int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var body struct {
			Items []struct{ Reachable, Synced bool }
		}
		if err := fd.GetJSON(ctx, "/api/v1/switches?limit=1000", &body); err == nil {
			n := 0
			for _, s := range body.Items {
				if s.Reachable && s.Synced {
					n++
				}
			}
			if n == switches {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("e2e: switches not all synced in time")
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// waitEvent returns the arrival time of the first event matching want, or
// zero after timeout. Link events are tracked to catch false downs.
func waitEvent(ctx context.Context, events <-chan sseEvent, timeout time.Duration, downs map[string]bool, expected string, want func(sseEvent) bool) time.Time {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return time.Time{}
		case <-t.C:
			return time.Time{}
		case e, ok := <-events:
			if !ok {
				return time.Time{}
			}
			if e.SubjectKind == "link" && e.To == "down" && e.Subject != expected {
				downs[e.Subject] = true
			}
			if want(e) {
				return e.At
			}
		}
	}
}

func drainFalseDowns(events <-chan sseEvent, downs map[string]bool, n *int) {
	for {
		select {
		case e, ok := <-events:
			if !ok {
				return
			}
			if e.SubjectKind == "link" && e.To == "down" {
				downs[e.Subject] = true
			}
		default:
			*n = len(downs)
			return
		}
	}
}
