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
