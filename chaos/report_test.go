package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// writeReport writes the run's markdown report to -chaos.report, if set,
// and its summary to the test log.
func (s *suite) writeReport() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	result := "**passed**"
	if len(s.violations) > 0 {
		result = fmt.Sprintf("**failed**: %d invariant violations", len(s.violations))
	}
	fmt.Fprintf(&b, "# Chaos suite\n\n`make chaos` (`go test ./chaos -run TestChaos -chaos.duration %v`), %s, seed %d: %s.\n\n",
		*duration, time.Now().UTC().Format("2006-01-02 15:04 UTC"), s.seed, result)
	fmt.Fprintf(&b, "System: 3 fabricd replicas (leader and shard leases %d s), a 3-member etcd cluster, PostgreSQL, "+
		"the userspace fabric (%d hosts, %d planes at %.0f Mbit/s a port) with one emulated gNMI switch per plane, "+
		"%d endpoint agents on the hosts' transports, traffic host-a→host-b and host-c→host-d (64 KiB messages). "+
		"Faults come one at a time (held 1-4 s, stalls 4-7 s, then repaired), and independently one plane at a time "+
		"fails for 3-8 s every 4-10 s. Machine: %d CPUs.\n\n", ttl, hosts, planes, rateBps/1e6, hosts, runtime.NumCPU())

	counts := map[string]int{}
	for _, f := range s.faults {
		counts[f.Kind]++
	}
	kinds := make([]string, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	b.WriteString("## Faults injected\n\n| fault | times |\n|---|---:|\n")
	for _, k := range kinds {
		fmt.Fprintf(&b, "| %s | %d |\n", k, counts[k])
	}
	fmt.Fprintf(&b, "| **all** | **%d** |\n\n", len(s.faults))

	b.WriteString("## Invariants checked\n\n| invariant | observations checked | violations |\n|---|---:|---:|\n")
	for _, inv := range []string{invTraffic, invAgentsMono, invComplete, invGenerations, invHistory, invConverge} {
		n := 0
		for _, v := range s.violations {
			if strings.HasPrefix(v, inv+":") {
				n++
			}
		}
		fmt.Fprintf(&b, "| %s | %d | %d |\n", inv, s.checked[inv], n)
	}
	b.WriteString("\n")
	notes := make([]string, 0, len(s.notes))
	for k := range s.notes {
		notes = append(notes, k)
	}
	slices.Sort(notes)
	for _, k := range notes {
		fmt.Fprintf(&b, "- %s: %s\n", k, s.notes[k])
	}
	if len(s.violations) > 0 {
		b.WriteString("\n## Violations\n\n")
		for _, v := range s.violations {
			fmt.Fprintf(&b, "- %s\n", v)
		}
	}
	b.WriteString("\n## Fault log\n\n| at | fault | target | held |\n|---:|---|---|---:|\n")
	for _, f := range s.faults {
		fmt.Fprintf(&b, "| %v | %s | %s | %v |\n", f.At.Round(100*time.Millisecond), f.Kind, f.Target, f.For.Round(100*time.Millisecond))
	}
	s.t.Log("\n" + b.String())
	if *reportTo == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(*reportTo), 0o755); err != nil {
		return err
	}
	return os.WriteFile(*reportTo, []byte(b.String()), 0o644)
}
