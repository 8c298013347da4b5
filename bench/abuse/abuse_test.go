package abuse

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(n ...int) []time.Duration {
		var d []time.Duration
		for _, v := range n {
			d = append(d, time.Duration(v)*time.Millisecond)
		}
		return d
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tc := range []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{"none", nil, 0.99, 0},
		{"one", ms(7), 0.99, 7 * time.Millisecond},
		{"p50 of 4 is the 2nd", ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{"p99 of 100 is the 99th", ms(hundred...), 0.99, 99 * time.Millisecond},
		{"max", ms(hundred...), 1, 100 * time.Millisecond},
		{"tiny q is the first", ms(1, 2, 3), 0.0001, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentile(tc.sorted, tc.q); got != tc.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tc.sorted, tc.q, got, tc.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	st := summarize([]time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond}, 1, 2*time.Second)
	if st.Requests != 4 || st.Failed != 1 || st.ReqPerSec != 1.5 || st.P50 != Millis(2*time.Millisecond) || st.Max != Millis(3*time.Millisecond) {
		t.Errorf("summarize = %+v", st)
	}
}

func TestOpenVerdict(t *testing.T) {
	for _, tc := range []struct {
		name  string
		w     ConnWatch
		limit time.Duration
		want  string
	}{
		{"closed quickly", ConnWatch{Seconds: 10}, 2 * time.Minute, Pass},
		{"closed late", ConnWatch{Seconds: 45}, 2 * time.Minute, Fail},
		{"open at a long cap", ConnWatch{Seconds: 120, Open: true}, 2 * time.Minute, Fail},
		{"open at a short cap", ConnWatch{Seconds: 12, Open: true}, 12 * time.Second, NA},
		{"no connection", ConnWatch{Error: "refused"}, 2 * time.Minute, NA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := openVerdict(tc.w, tc.limit); got != tc.want {
				t.Errorf("openVerdict(%+v, %v) = %s, want %s", tc.w, tc.limit, got, tc.want)
			}
		})
	}
}

func TestRowsAndMarkdown(t *testing.T) {
	r := &Result{Config: DefaultConfig(), Phases: []string{"growth", "metrics", "flood"},
		Growth: &GrowthResult{Requests: 10000, DBBefore: 8 << 20, DBAfter: 9 << 20, AuditBefore: 0, AuditAfter: 3 << 20,
			RSSBefore: 40 << 20, RSSPeak: 60 << 20, RSSAudit: 100 << 20, AuditStatus: 200, Statuses: map[int]int{401: 9000, 0: 3}},
		Metrics: &MetricsResult{Requests: 3000, Before: 40000, After: 40900},
		Flood: &FloodResult{Quiet: TrafficStats{P99: Millis(2 * time.Millisecond)}, Flood: TrafficStats{P99: Millis(5 * time.Millisecond), Requests: 10},
			FloodStatuses: map[int]int{401: 5}},
	}
	r.Rows = r.rows()
	want := []string{Fail, Pass, Pass, None, Fail, Pass, Fail, None, Pass}
	if len(r.Rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(r.Rows), len(want), r.Rows)
	}
	for i, row := range r.Rows {
		if row.Verdict != want[i] {
			t.Errorf("row %d %q: verdict %s, want %s", i+1, row.Figure, row.Verdict, want[i])
		}
	}
	var b bytes.Buffer
	WriteMarkdown(&b, r, "bench-abuse")
	md := b.String()
	for _, s := range []string{"| 1 | audit_log growth", "| 3.00 MiB | < 2 MiB | FAIL |", "| – | – |", "transport error ×3, 401 ×9000", "`bench-abuse`"} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q:\n%s", s, md)
		}
	}
	b.Reset()
	if err := WriteJSON(&b, r); err != nil || strings.Count(b.String(), "\n") != 1 || !strings.Contains(b.String(), `"p99_ms":5`) {
		t.Errorf("WriteJSON = %q, %v", b.String(), err)
	}
}

func TestParsePhases(t *testing.T) {
	if got, err := ParsePhases("all"); err != nil || len(got) != len(Phases) {
		t.Errorf("all: %v, %v", got, err)
	}
	if got, err := ParsePhases("flood, conns"); err != nil || strings.Join(got, ",") != "flood,conns" {
		t.Errorf("flood, conns: %v, %v", got, err)
	}
	if _, err := ParsePhases("growth,nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("nope: %v", err)
	}
}

func TestApplyQuick(t *testing.T) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--quick", "--flood", "7s"}); err != nil {
		t.Fatal(err)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if err := cfg.ApplyQuick(fs, func(n string) bool { return given[n] }); err != nil {
		t.Fatal(err)
	}
	if cfg.Flood != 7*time.Second || cfg.Quiet != 2*time.Second || cfg.LargeRequests != 300 {
		t.Errorf("after --quick --flood 7s: flood %v, quiet %v, large requests %d", cfg.Flood, cfg.Quiet, cfg.LargeRequests)
	}
}
