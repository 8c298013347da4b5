package e2e

import (
	"fmt"
	"io"
	"time"

	"github.com/multiplane/multiplane/bench/suite"
)

func machineLines(w io.Writer) {
	m := suite.DescribeMachine()
	fmt.Fprintf(w, "- Date: %s\n- Machine: %d CPUs, %s; %s; %s\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), m.CPUs, m.CPUModel, m.Kernel, m.GoVersion)
}

func mb(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// WriteTelemetryMarkdown writes docs/benchmarks/telemetry.md.
func WriteTelemetryMarkdown(w io.Writer, r *TelemetryResult, command string) {
	c := r.Config
	fmt.Fprintf(w, "# Telemetry and health benchmark\n\n")
	machineLines(w)
	fmt.Fprintf(w, "- Command: `%s`\n", command)
	fmt.Fprintf(w, "- Setup: the real `fabricd` binary (private PostgreSQL, embedded etcd) collecting from %d emulated gNMI switches × %d ports "+
		"(OpenConfig's reference subscribe server, synthetic counters, %d planes) at a %v sample interval; flap damping off, up-hold %v. "+
		"The benchmark process runs the switches and reads fabricd's `/api/v1/stream` (server-sent events) and `/metrics`; "+
		"both share the machine's cores.\n\n", c.Switches, c.Ports, c.Planes, c.Sample, c.UpHold)
	fmt.Fprintf(w, "| figure | measured | target |\n|---|---|---|\n")
	fmt.Fprintf(w, "| detection: port DOWN at the switch → plane state change on the API stream, p50 / p99 / max over %d failures | %.1f / %.1f / %.1f ms | p99 ≤ 200 ms |\n",
		r.Detect.N, ms(r.Detect.P50), ms(r.Detect.P99), ms(r.Detect.Max))
	fmt.Fprintf(w, "| the same inside fabricd (its detection histogram: oper-status timestamp at the switch → plane state change), p50 / p99 | %.1f / %.1f ms | |\n",
		ms(r.InternalP50), ms(r.InternalP99))
	fmt.Fprintf(w, "| failures not seen within 5 s | %d | 0 |\n", r.Missed)
	fmt.Fprintf(w, "| restore: port UP → plane healthy, p50 / p99 (includes the %v up-hold) | %.1f / %.1f ms | after the hold time |\n",
		c.UpHold, ms(r.Restore.P50), ms(r.Restore.P99))
	fmt.Fprintf(w, "| ingest, steady state (%v window) | %.0f leaf updates/s using %.2f cores of fabricd | |\n", c.Ingest, r.UpdatesPerSec, r.CPUCores)
	fmt.Fprintf(w, "| ingest per CPU-second of fabricd | %.0f updates/s per core | ≥ 200,000 |\n", r.UpdatesPerCPUSec)
	fmt.Fprintf(w, "| fabricd memory over a %v soak: RSS start → end | %s → %s | flat |\n", c.Soak, mb(r.RSSStart), mb(r.RSSEnd))
	fmt.Fprintf(w, "| fabricd Go heap in use: start → end | %s → %s | flat |\n", mb(int64(r.HeapStart)), mb(int64(r.HeapEnd)))
	fmt.Fprintf(w, "| links down with no injected failure | %d | 0 |\n", r.FalseDowns)
	if len(r.RSSSamples) > 0 {
		fmt.Fprintf(w, "\nRSS every 10 s during the soak (MiB):")
		for _, s := range r.RSSSamples {
			fmt.Fprintf(w, " %.0f", float64(s)/(1<<20))
		}
		fmt.Fprintln(w)
	}
}

func convRow(w io.Writer, name string, c Convergence) {
	fmt.Fprintf(w, "| %s | %.0f / %.0f / %.0f ms | %s | %s | %.0f / %.0f ms | %.0f ms | %.0f ms | %.0f | %.0f | %.1f KiB | %.2f s | %d |\n",
		name, ms(c.Latency.P50), ms(c.Latency.P99), ms(c.Latency.Max), optMs(c.Detect), optMs(c.Published),
		ms(c.Delivery.P50), ms(c.Delivery.P99), c.ComputeSec*1000, c.WriteSec*1000, c.Generations, c.Writes, c.Bytes/1024, c.CPU, c.Missing)
}

func optMs(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f ms", ms(d))
}

// WriteConvergenceMarkdown writes docs/benchmarks/convergence.md.
func WriteConvergenceMarkdown(w io.Writer, r *ConvergenceResult, command string) {
	c := r.Config
	fmt.Fprintf(w, "# Convergence benchmark\n\n")
	machineLines(w)
	fmt.Fprintf(w, "- Command: `%s`\n", command)
	fmt.Fprintf(w, "- Setup: the real `fabricd` binary (private PostgreSQL, embedded etcd, policy leader) with %d endpoints on %d planes, "+
		"%d emulated gNMI switches per plane (%d ports each, %v sampling, the switches' samples spread evenly over the interval as independent switches' are); %d endpoint agents (real agent code, real etcd watches, "+
		"%d shared etcd clients, one shared status lease) in the benchmark process, applying to a recorder instead of a transport. "+
		"Everything shares the machine's cores.\n",
		c.Endpoints, c.Planes, c.PerPlane, c.Endpoints/c.PerPlane, c.Sample, c.Endpoints, c.Clients)
	fmt.Fprintf(w, "- Agents: %.1f KiB heap and %.1f goroutines each; all %d applied their first generation %.1f s after starting.\n",
		r.AgentHeapBytes/1024, r.AgentGoroutines, c.Endpoints, r.Initial.Seconds())
	fmt.Fprintf(w, "- Idle: fabricd used %.2f cores over the %s settle time before the first event (telemetry at %s sampling).\n\n",
		r.FabricdIdleCPU, c.Settle, c.Sample)
	fmt.Fprintf(w, "Latency is from the trigger (first port set DOWN at the switches, or the drain request sent) to each agent applying a document that reflects it. "+
		"Breakdown: *detect* = trigger → fabricd's health engine changed the plane's state (the event's own timestamp, read from the event history after the agents converged; same clock); *published* = trigger → the generation the agents end on is announced "+
		"in etcd (detection, computation, debounce, etcd writes); *delivery+apply* = that announcement → each agent applied; *compute* and *etcd write* are "+
		"fabricd's own time computing the policy (for a plane going down: the planes' statuses, written ahead of the full computation) and writing it, summed over the generations it published for the event.\n\n")
	fmt.Fprintf(w, "| event | latency p50 / p99 / max | detect | published | delivery+apply p50 / p99 | compute | etcd write | generations | etcd writes | bytes written | fabricd CPU | agents missing |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	convRow(w, fmt.Sprintf("plane p0 down (all %d ports DOWN via gNMI; injection took %.0f ms)", c.Endpoints, ms(r.Injection)), r.PlaneDown)
	convRow(w, "plane p0 back up (after the 1 s up-hold)", r.PlaneUp)
	if len(r.Drains) > 0 {
		var p50s, p99s []time.Duration
		for _, d := range r.Drains {
			p50s, p99s = append(p50s, d.Latency.P50), append(p99s, d.Latency.P99)
		}
		n := float64(len(r.Drains))
		fmt.Fprintf(w, "\nDrain/undrain of p1, one operation a second, %d operations: per-operation p99 latency median %.0f ms, worst %.0f ms; "+
			"median per-operation p50 %.0f ms; %.1f etcd writes and %.1f KiB per operation; fabricd used %.2f cores during the cycles.\n",
			len(r.Drains), ms(quantiles(p99s).P50), ms(quantiles(p99s).Max), ms(quantiles(p50s).P50), r.DrainWrites/n, r.DrainBytes/n/1024, r.FabricdCPUPerSec)
		missing := 0
		for _, d := range r.Drains {
			missing += d.Missing
		}
		fmt.Fprintf(w, "Agents that missed an operation's convergence deadline (%v): %d.\n", c.Timeout, missing)
	}
}
