// Command bench measures the telemetry collector's ingest: N emulated gNMI
// switches × M ports (fabricsim/gnmisim, in a child process so that only the
// collector's CPU is counted) stream to a real telemetry.Collector feeding a
// counting observer, at the sample interval and in burst mode (switches
// publish as fast as they can). It reports leaf updates per second, updates
// per CPU-second of the collector process (getrusage), and heap in use, and
// writes a markdown table.
//
//	go run ./telemetry/bench -switches 64 -ports 64 -duration 30s -out docs/benchmarks/telemetry-collector.md
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/multiplane/multiplane/fabricsim/gnmisim"
	"github.com/multiplane/multiplane/planes"
	"github.com/multiplane/multiplane/telemetry"
)

const fleetEnv = "MULTIPLANE_TELEMETRY_BENCH_FLEET"

type options struct {
	switches, ports, runs int
	interval, duration    time.Duration
	burstDuration         time.Duration
	soakDuration          time.Duration
	out                   string
	modes                 string
}

func main() {
	var o options
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	fs.IntVar(&o.switches, "switches", 64, "emulated switches")
	fs.IntVar(&o.ports, "ports", 64, "ports per switch")
	fs.IntVar(&o.runs, "runs", 3, "runs per mode (the table shows medians)")
	fs.DurationVar(&o.interval, "interval", time.Second, "sample interval (switch tick and collector SAMPLE interval)")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "measured window per run at the sample interval")
	fs.DurationVar(&o.burstDuration, "burst-duration", 10*time.Second, "measured window per run in burst mode")
	fs.StringVar(&o.out, "out", "docs/benchmarks/telemetry-collector.md", "markdown report to write (empty: stdout only)")
	fs.StringVar(&o.modes, "modes", "sample,burst", "modes to run: sample, burst, soak (sample mode for -soak-duration, once)")
	fs.DurationVar(&o.soakDuration, "soak-duration", 5*time.Minute, "measured window of the soak run")
	cpuprofile := fs.String("cpuprofile", "", "write the collector's CPU profile here")
	fs.Parse(os.Args[1:])
	if *cpuprofile != "" && os.Getenv(fleetEnv) == "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}

	if os.Getenv(fleetEnv) != "" {
		if err := runFleet(o, os.Getenv(fleetEnv) == "burst"); err != nil {
			fmt.Fprintln(os.Stderr, "fleet:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(o); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// runFleet is the child: it starts the switches, prints the topology as one
// JSON line, and runs until its stdin closes.
func runFleet(o options, burst bool) error {
	f, err := gnmisim.StartFleet(gnmisim.FleetConfig{Switches: o.switches, Ports: o.ports, Tick: o.interval, Burst: burst, OctetsPerSec: 1e9})
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := json.Marshal(f.Topology())
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	io.Copy(io.Discard, os.Stdin)
	return nil
}

// counter is the observer: it only counts.
type counter struct {
	samples, batches, rates, opers, reach atomic.Int64
}

func (c *counter) ObserveInterfaces(b []planes.InterfaceSample) {
	c.batches.Add(1)
	c.samples.Add(int64(len(b)))
	var r, o int64
	for i := range b {
		if b[i].Rates != nil {
			r++
		}
		if b[i].Oper != "" {
			o++
		}
	}
	c.rates.Add(r)
	c.opers.Add(o)
}

func (c *counter) ObserveSwitch(planes.SwitchReachability) { c.reach.Add(1) }

type result struct {
	mode               string
	wall, cpu          time.Duration
	updates, samples   int64
	updatesPerSec      float64
	updatesPerCPUSec   float64
	cpuCores           float64
	heapStart, heapMax uint64
	heapEnd            uint64
	reconnects         uint64
	notSynced          int
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapLive is the heap marked live by the last GC: what the collector
// keeps, without the garbage waiting for the next cycle.
func heapLive() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func run(o options) error {
	var results []result
	for _, mode := range strings.Split(o.modes, ",") {
		runs := o.runs
		switch mode {
		case "sample", "burst":
		case "soak":
			runs = 1
		default:
			return fmt.Errorf("unknown mode %q", mode)
		}
		for i := range runs {
			r, err := runOnce(o, mode)
			if err != nil {
				return fmt.Errorf("%s run %d: %w", mode, i+1, err)
			}
			fmt.Fprintf(os.Stderr, "%s run %d: %.0f updates/s, %.2f cores, %.0f updates per CPU-second, live heap %s → %s (max %s)\n",
				mode, i+1, r.updatesPerSec, r.cpuCores, r.updatesPerCPUSec, mib(r.heapStart), mib(r.heapEnd), mib(r.heapMax))
			results = append(results, r)
		}
	}
	report := markdown(o, results)
	fmt.Print(report)
	if o.out != "" {
		return os.WriteFile(o.out, []byte(report), 0o644)
	}
	return nil
}

func runOnce(o options, mode string) (result, error) {
	self, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, self, os.Args[1:]...)
	fleetMode := mode
	if mode == "soak" {
		fleetMode = "sample"
	}
	cmd.Env = append(os.Environ(), fleetEnv+"="+fleetMode)
	if mode == "burst" {
		cmd.Env = append(cmd.Env, "GOMAXPROCS=1") // leave a core to the collector
	}
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	defer func() { stdin.Close(); cancel(); cmd.Wait() }()
	line, err := bufio.NewReaderSize(stdout, 1<<22).ReadString('\n')
	if err != nil {
		return result{}, fmt.Errorf("reading the fleet's topology: %w", err)
	}
	var topo planes.Topology
	if err := json.Unmarshal([]byte(line), &topo); err != nil {
		return result{}, err
	}

	obs := &counter{}
	col, err := telemetry.New(telemetry.Config{SampleInterval: o.interval, SilenceTimeout: 10 * o.interval}, obs,
		slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		return result{}, err
	}
	col.Reconcile(&topo)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- col.Run(runCtx) }()
	defer func() { stop(); <-done }()

	// Warm up: every switch synced, then two intervals.
	deadline := time.Now().Add(60 * time.Second)
	for {
		n := 0
		for _, s := range col.Switches() {
			if s.Synced {
				n++
			}
		}
		if n == o.switches {
			break
		}
		if time.Now().After(deadline) {
			return result{}, errors.New("switches did not all sync within 60s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * o.interval)

	window := o.duration
	switch mode {
	case "burst":
		window = o.burstDuration
	case "soak":
		window = o.soakDuration
	}
	runtime.GC()
	r := result{mode: mode, heapStart: heapLive()}
	updates := func() (u uint64, rc uint64) {
		for _, s := range col.Switches() {
			u += s.Updates
			rc += s.Reconnects
		}
		return
	}
	u0, rc0 := updates()
	s0 := obs.samples.Load()
	c0, t0 := cpuTime(), time.Now()
	var heaps []uint64
	tk := time.NewTicker(time.Second)
	for time.Since(t0) < window {
		<-tk.C
		heaps = append(heaps, heapLive())
	}
	tk.Stop()
	c1, t1 := cpuTime(), time.Now()
	u1, rc1 := updates()
	r.wall, r.cpu = t1.Sub(t0), c1-c0
	r.updates, r.samples = int64(u1-u0), obs.samples.Load()-s0
	r.updatesPerSec = float64(r.updates) / r.wall.Seconds()
	r.updatesPerCPUSec = float64(r.updates) / r.cpu.Seconds()
	r.cpuCores = r.cpu.Seconds() / r.wall.Seconds()
	r.heapEnd = heaps[len(heaps)-1]
	r.heapMax = slices.Max(heaps)
	r.reconnects = rc1 - rc0
	for _, s := range col.Switches() {
		if !s.Synced {
			r.notSynced++
		}
	}
	return r, nil
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func median[T any](rs []result, f func(result) T, less func(a, b T) int) T {
	v := make([]T, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.SortFunc(v, less)
	return v[len(v)/2]
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpU(a, b uint64) int { return cmpF(float64(a), float64(b)) }

func markdown(o options, results []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Telemetry collector ingest\n\n")
	fmt.Fprintf(&b, "`go run ./telemetry/bench -switches %d -ports %d -interval %v -duration %v -burst-duration %v -soak-duration %v -runs %d -modes %s`\n\n",
		o.switches, o.ports, o.interval, o.duration, o.burstDuration, o.soakDuration, o.runs, o.modes)
	fmt.Fprintf(&b, "%d emulated gNMI switches (fabricsim/gnmisim, OpenConfig's reference subscribe server) × %d ports, "+
		"in a child process; one telemetry.Collector stream per switch feeding a counting observer. "+
		"An update is one gNMI leaf (per port and tick: 9 interface counters + 2 queue counters, one notification each). "+
		"CPU is the collector process's user+system time (getrusage RUSAGE_SELF) over the measured window; "+
		"heap is the live heap after the last GC (/gc/heap/live:bytes), sampled every second. "+
		"In burst mode the switches publish as fast as they can (child limited to GOMAXPROCS=1). "+
		"Go %s, %s/%s, %d CPUs, %s. Medians of %d runs.\n\n",
		o.switches, o.ports, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"), o.runs)
	fmt.Fprintf(&b, "| mode | updates/s | collector CPU (cores) | updates per CPU-second | samples/s | live heap start → end (max) | reconnects |\n")
	fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---|---:|\n")
	for _, mode := range []string{"sample", "burst", "soak"} {
		var rs []result
		for _, r := range results {
			if r.mode == mode {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			continue
		}
		name := fmt.Sprintf("sample %v", o.interval)
		switch mode {
		case "burst":
			name = "burst"
		case "soak":
			name = fmt.Sprintf("soak: sample %v for %v", o.interval, o.soakDuration)
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.3f | %.0f | %.0f | %s → %s (%s) | %d |\n", name,
			median(rs, func(r result) float64 { return r.updatesPerSec }, cmpF),
			median(rs, func(r result) float64 { return r.cpuCores }, cmpF),
			median(rs, func(r result) float64 { return r.updatesPerCPUSec }, cmpF),
			median(rs, func(r result) float64 { return float64(r.samples) / r.wall.Seconds() }, cmpF),
			mib(median(rs, func(r result) uint64 { return r.heapStart }, cmpU)),
			mib(median(rs, func(r result) uint64 { return r.heapEnd }, cmpU)),
			mib(median(rs, func(r result) uint64 { return r.heapMax }, cmpU)),
			median(rs, func(r result) uint64 { return r.reconnects }, cmpU))
	}
	fmt.Fprintf(&b, "\nPer run:\n\n| mode | window | updates | CPU | updates per CPU-second | live heap start → end (max) |\n|---|---:|---:|---:|---:|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %.1fs | %d | %.2fs | %.0f | %s → %s (%s) |\n", r.mode, r.wall.Seconds(), r.updates, r.cpu.Seconds(),
			r.updatesPerCPUSec, mib(r.heapStart), mib(r.heapEnd), mib(r.heapMax))
	}
	return b.String()
}
