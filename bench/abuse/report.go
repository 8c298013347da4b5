package abuse

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/multiplane/multiplane/bench/suite"
)

// Targets of issue 12.
const (
	targetAuditGrowth = 2 << 20  // bytes, audit log (and database) under the large requests
	targetRSSGrowth   = 50 << 20 // bytes
	targetMetrics     = 1 << 10  // bytes of /metrics growth
	targetFloodRatio  = 2.0      // flood p99 / quiet p99
	targetOpen        = 30 * time.Second
)

// Verdicts.
const (
	Pass = "PASS"
	Fail = "FAIL"
	NA   = "n/a" // the run was too short to tell
	None = "–"   // a figure without a target
)

// Row is one line of the report.
type Row struct {
	Figure   string `json:"figure"`
	Measured string `json:"measured"`
	Target   string `json:"target"`
	Verdict  string `json:"verdict"`
}

func verdict(ok bool) string {
	if ok {
		return Pass
	}
	return Fail
}

func mib(b int64) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }

// openVerdict judges a connection that should close within targetOpen but
// was watched for at most limit.
func openVerdict(w ConnWatch, limit time.Duration) string {
	switch {
	case w.Error != "":
		return NA
	case !w.Open:
		return verdict(w.Seconds < targetOpen.Seconds())
	case limit < targetOpen:
		return NA
	}
	return Fail
}

// statuses renders a status count as "401 ×7000, 404 ×3000".
func statuses(m map[int]int) string {
	var parts []string
	for _, code := range slices.Sorted(maps.Keys(m)) {
		name := fmt.Sprint(code)
		if code == 0 {
			name = "transport error"
		}
		parts = append(parts, fmt.Sprintf("%s ×%d", name, m[code]))
	}
	return strings.Join(parts, ", ")
}

func (r *Result) rows() []Row {
	var rows []Row
	add := func(figure, measured, target, v string) {
		rows = append(rows, Row{figure, measured, target, v})
	}
	c := r.Config
	if g := r.Growth; g != nil {
		what := fmt.Sprintf("%d unauthenticated requests with a %d KB path segment (%d connections)", g.Requests, c.PathBytes/1000, c.Conns)
		if g.Stopped != "" {
			what += fmt.Sprintf(", stopped early (of %d): %s", c.LargeRequests, g.Stopped)
		}
		if g.AuditBefore >= 0 {
			add("audit_log growth (pg_total_relation_size) under "+what, mib(g.AuditAfter-g.AuditBefore), "< 2 MiB", verdict(g.AuditAfter-g.AuditBefore < targetAuditGrowth))
		} else {
			add("audit_log growth under "+what, "no audit_log table", "< 2 MiB", NA)
		}
		add("database growth (pg_database_size), same requests", mib(g.DBAfter-g.DBBefore), "< 2 MiB", verdict(g.DBAfter-g.DBBefore < targetAuditGrowth))
		add("fabricd RSS growth, same requests (peak − start)", fmt.Sprintf("%s (%s → %s)", mib(g.RSSPeak-g.RSSBefore), mib(g.RSSBefore), mib(g.RSSPeak)),
			"< 50 MiB", verdict(g.RSSPeak-g.RSSBefore < targetRSSGrowth))
		add(fmt.Sprintf("GET /api/v1/audit?limit=%d afterwards (admin token): response size", c.AuditLimit),
			fmt.Sprintf("%s (status %d, %.1f s)", mib(g.AuditBytes), g.AuditStatus, g.AuditSeconds), "", None)
		add("fabricd RSS after that GET, growth over the start", fmt.Sprintf("%s (%s)", mib(g.RSSAudit-g.RSSBefore), mib(g.RSSAudit)),
			"< 50 MiB", verdict(g.RSSAudit-g.RSSBefore < targetRSSGrowth))
	}
	if m := r.Metrics; m != nil {
		d := m.After - m.Before
		add(fmt.Sprintf("/metrics size before → after %d requests with random methods", m.Requests),
			fmt.Sprintf("%.1f KiB → %.1f KiB (%+d bytes)", float64(m.Before)/1024, float64(m.After)/1024, d), "unchanged within 1 KiB", verdict(d <= targetMetrics && d >= -targetMetrics))
	}
	if f := r.Flood; f != nil {
		ratio := 0.0
		if f.Quiet.P99 > 0 {
			ratio = float64(f.Flood.P99) / float64(f.Quiet.P99)
		}
		add(fmt.Sprintf("legitimate GET /api/v1/planes p99: quiet (%v, after 3 s unmeasured) → during a %v flood of %d clients with random bearer tokens", c.Quiet, c.Flood, c.FloodClients),
			fmt.Sprintf("%v → %v (×%.2f)", f.Quiet.P99, f.Flood.P99, ratio), "≤ ×2", verdict(f.Quiet.P99 > 0 && ratio <= targetFloodRatio))
		add(fmt.Sprintf("legitimate throughput (%d clients, %v pause): quiet → flood", c.LegitClients, c.LegitPause),
			fmt.Sprintf("%.0f → %.0f req/s (flood: %.0f req/s)", f.Quiet.ReqPerSec, f.Flood.ReqPerSec, f.FloodPerSec), "", None)
		add("legitimate requests refused or failed during the flood", fmt.Sprintf("%d of %d", f.Flood.Failed, f.Flood.Requests), "0", verdict(f.Flood.Failed == 0))
	}
	if cn := r.Conns; cn != nil {
		limit := time.Duration(cn.CapSeconds * float64(time.Second))
		body := fmt.Sprintf("PUT /api/v1/topology, Content-Length %d, 1 byte every %v", c.SlowBodyLength, c.SlowBodyInterval)
		add("slow body with the admin token ("+body+"): open for", cn.SlowBodyAdmin.String(), "< 30 s", openVerdict(cn.SlowBodyAdmin, limit))
		add("slow body without a token (same): open for", cn.SlowBodyAnon.String(), "< 30 s", openVerdict(cn.SlowBodyAnon, limit))
		add("idle keep-alive connection after one request: open for", cn.IdleKeepAlive.String(), "< 30 s", openVerdict(cn.IdleKeepAlive, limit))
		held := cn.SilentHeld + cn.AfterHeld
		v := verdict(held == 0)
		if held > 0 && cn.HoldSeconds < targetOpen.Seconds() {
			v = NA
		}
		add(fmt.Sprintf("idle unauthenticated connections still open after %.0f s: never sent a byte / after one request", cn.HoldSeconds),
			fmt.Sprintf("%d of %d / %d of %d", cn.SilentHeld, cn.SilentOpened, cn.AfterHeld, cn.AfterOpened), "0", v)
	}
	return rows
}

// WriteMarkdown writes the report (docs/benchmarks/abuse.md).
func WriteMarkdown(w io.Writer, r *Result, command string) {
	c := r.Config
	m := suite.DescribeMachine()
	fmt.Fprintf(w, "# Abuse benchmark\n\n")
	if c.Quick {
		fmt.Fprintf(w, "**Quick smoke run (--quick): smaller counts and shorter windows; not the measurement.**\n\n")
	}
	fmt.Fprintf(w, "- Date: %s; took %.0f s\n", r.Start.UTC().Format("2006-01-02 15:04 MST"), r.Seconds)
	fmt.Fprintf(w, "- Machine: %d CPUs, %s; %s; %s\n", m.CPUs, m.CPUModel, m.Kernel, m.GoVersion)
	fmt.Fprintf(w, "- Command: `%s` (`make bench-abuse`; `bench-abuse --help` lists every flag)\n", command)
	fmt.Fprintf(w, "- Setup: the real `fabricd` binary (private PostgreSQL, embedded etcd, `%s` loaded) in a temporary data directory, "+
		"listening on a free loopback port; the benchmark process is its only client, over loopback, and shares the machine's cores with it. "+
		"Sizes are read from fabricd's database (`pg_total_relation_size('audit_log')`, `pg_database_size`), RSS from `/proc/<pid>/status`. "+
		"Phases, in order: %s. Large requests stop early at a safety cap (database +%s, RSS %s) so a vulnerable fabricd cannot fill the machine. "+
		"Before the `/metrics` measurement every route gets two random-method requests, so a bounded set of series exists already. "+
		"Hostile traffic comes from %d loopback addresses (127.0.1.x), the admin and legitimate clients from 127.0.0.1.\n\n",
		c.Topology, strings.Join(r.Phases, ", "), mib(c.MaxDBGrowth), mib(c.MaxRSS), c.Sources)
	fmt.Fprintf(w, "| # | figure | measured | target | verdict |\n|---|---|---|---|---|\n")
	for i, row := range r.Rows {
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s |\n", i+1, row.Figure, row.Measured, cellOr(row.Target), row.Verdict)
	}
	var notes []string
	if g := r.Growth; g != nil {
		notes = append(notes, fmt.Sprintf("Large requests took %.1f s; responses: %s.", g.Seconds, statuses(g.Statuses)))
	}
	if m := r.Metrics; m != nil {
		notes = append(notes, "Random-method responses: "+statuses(m.Statuses)+".")
	}
	if f := r.Flood; f != nil {
		notes = append(notes, fmt.Sprintf("Legitimate p50 quiet → flood: %v → %v; flood responses: %s.", f.Quiet.P50, f.Flood.P50, statuses(f.FloodStatuses)))
	}
	if cn := r.Conns; cn != nil {
		notes = append(notes, fmt.Sprintf("Connections watched for at most %.0f s; %d idle connections asked for (bounded by the open-file limit).", cn.CapSeconds, cn.IdleAsked))
	}
	notes = append(notes, "Verdict n/a: the run was too short to tell (a connection still open at a cap below 30 s, or none could be made).")
	if len(notes) > 0 {
		fmt.Fprintf(w, "\n%s\n", strings.Join(notes, " "))
	}
}

func cellOr(s string) string {
	if s == "" {
		return None
	}
	return s
}

// WriteJSON writes the result as one line of JSON.
func WriteJSON(w io.Writer, r *Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
