package suite

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/multiplane/multiplane/bench"
	"github.com/multiplane/multiplane/internal/testenv"
)

func fakeReport() *Report {
	cfg := Config{Endpoint: "x", Runs: 3, Duration: time.Second}
	_ = cfg.defaults()
	var runs []Run
	for _, s := range Scenarios {
		for _, l := range cfg.lossesOf(s) {
			for _, m := range cfg.modesOf(s) {
				for _, poll := range cfg.pollsOf(s, m) {
					for i := range 3 {
						r := Run{Scenario: s.Name, Loss: l, Mode: m, Poll: poll, Index: i, WallSeconds: 9 + float64(i),
							PacketsSent: 1000, SwitchDrops: uint64(i)}
						if m == bench.ModeGBN {
							r.Error = ErrUnavailable.Error() + ": not yet"
						} else {
							rt := int64(10 * i)
							j := 0.9 + 0.01*float64(i)
							r.Result = &bench.Result{GoodputBps: s.LineRate() * (0.5 + 0.1*float64(i)), Retransmits: &rt,
								JainFairness: j, JainClients: &j, FailedConnections: i}
							if s.Latency {
								r.Result.Latency = []bench.LatencyStats{{Bytes: 64, Iterations: 1000, TypicalUs: 20 + float64(i), P99Us: 40, P999Us: 80 + float64(i)}}
							}
							if s.RateStep {
								r.Step = &StepFigure{SettleMs: 2 + 3*float64(i), EgressSettleMs: 1 + float64(i), CapBefore: 600e6, CapAfter: 300e6,
									GoodBefore: 550e6 + 10e6*float64(i), GoodAfter: 280e6 + 5e6*float64(i)}
							}
						}
						runs = append(runs, r)
					}
				}
			}
		}
	}
	return &Report{Config: cfg, Machine: DescribeMachine(), Start: time.Now(), End: time.Now(), Figures: figures(&cfg, runs)}
}

func TestReportRendering(t *testing.T) {
	rep := fakeReport()
	f := find(rep.Figures, "R1", 0.01, bench.ModeMPTCP)
	if f == nil || f.Goodput != 0.6*800e6 || f.Retrans != 10 {
		t.Fatalf("median figure %+v", f)
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| R1 | 4 × 200 Mbit/s, MTU 1500 | mptcp | 480.0 | 60.0% |", "## R3: plane scaling", "| mptcp | 0% | 480.0 | 240.0 | 2.00 |",
		"gbn (every scenario)", "## Machine", "CPUs (nproc)",
		"| multipath | 1% | 480.0 | 1.00 | 1.00 | 0.9100 | 2 | 10.0 |",          // C1: medians, worst failed count
		"| I1-500 | 500 | mptcp | 480.0 | 60.0% | 0.9100 | 0.100% | 2 | 10.0 |", // I1: drops 1 of 1000
		"| multipath | busy | 0.0 | 21.0 | 0.0 | 40.0 | 81.0 |",                 // L1, per poll mode
		"| tcp | kernel |",
		"| multipath | 3 | 8.0 ms | 3.0 ms | 560.0 Mbit/s | 93.3% | 285.0 Mbit/s | 95.0% |"} { // S1: worst settle, medians
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	var img bytes.Buffer
	if err := WriteChart(&img, rep); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&img); err != nil {
		t.Fatalf("chart is not a PNG: %v", err)
	}
	img.Reset()
	if ok, err := WriteLatencyChart(&img, rep); err != nil || !ok {
		t.Fatalf("latency chart: %v, %v", ok, err)
	}
	if _, err := png.Decode(&img); err != nil {
		t.Fatalf("latency chart is not a PNG: %v", err)
	}
	if l := find(rep.Figures, "L1", 0, bench.ModeMultipath); l != nil {
		t.Fatalf("L1 multipath has a figure without a poll mode: %+v", l)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{7}, 7}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v", tc.in, got)
		}
	}
}

// TestSmokeTCP runs the suite for one short run per mode (tcp, mptcp,
// multipath) on R3-4 at 0% loss, profiling the multipath processes.
func TestSmokeTCP(t *testing.T) {
	testenv.RequireNetns(t)
	for _, c := range []string{"tc", "nft", "ethtool", "sysctl", "go"} {
		testenv.RequireCommand(t, c)
	}
	dir := t.TempDir()
	ep := filepath.Join(dir, "endpoint")
	ctx, cancel := context.WithTimeout(testenv.Context(t), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", ep, "github.com/multiplane/multiplane/cmd/endpoint").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	modes := []bench.Mode{bench.ModeTCP, bench.ModeMPTCP, bench.ModeMultipath}
	profiles := filepath.Join(dir, "profiles")
	if err := os.Mkdir(profiles, 0o755); err != nil {
		t.Fatal(err)
	}
	rep, err := Execute(ctx, Config{Endpoint: ep, Scenarios: []string{"R3-4"}, Modes: modes,
		Losses: []float64{0}, Runs: 1, Duration: time.Second, OutDir: dir, ProfileDir: profiles, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := filepath.Glob(filepath.Join(profiles, "*"))
	for i := range got {
		got[i] = filepath.Base(got[i])
	}
	if want := []string{"R3-4-multipath-loss0-run0-client0.pprof", "R3-4-multipath-loss0-run0-server.pprof"}; !slices.Equal(got, want) {
		t.Errorf("profiles %q, want %q (multipath only)", got, want)
	}
	for _, m := range modes {
		f := find(rep.Figures, "R3-4", 0, m)
		if f == nil || f.Goodput <= 0 {
			t.Fatalf("%s: %+v", m, f)
		}
		t.Logf("%s: %.1f Mbit/s", m, f.Goodput/1e6)
		if m == bench.ModeTCP && f.Goodput > 100e6 {
			t.Fatalf("tcp beat one plane's rate: %.1f Mbit/s", f.Goodput/1e6)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "raw", "*.jsonl")); len(m) != 1 {
		t.Fatalf("raw files: %v", m)
	}
}

func TestLineShare(t *testing.T) {
	// 64 KiB over 1449-byte payloads: 46 datagrams of 65 bytes of headers
	// (Ethernet 14, IP 20, UDP 8, DATA 19, CRC 4).
	if got, want := lineShare(65536, 1500), 65536.0/(65536+46*65); got != want {
		t.Fatalf("lineShare(65536, 1500) = %v, want %v", got, want)
	}
	if got := lineShare(65536, 9000); got < 0.99 || got > 0.993 {
		t.Fatalf("lineShare(65536, 9000) = %v", got)
	}
}

func TestCPUProbe(t *testing.T) {
	if d := CPUProbe(); d <= 0 || d > time.Minute {
		t.Fatalf("CPU probe took %v", d)
	}
}

// S1's figure: a run that never settled makes the cell "never".
func TestStepMedians(t *testing.T) {
	st := stepMedians([]*StepFigure{{SettleMs: 3, GoodAfter: 1}, {SettleMs: -1, GoodAfter: 3}, {SettleMs: 9, GoodAfter: 2}})
	if st.SettleMs != -1 || st.GoodAfter != 2 {
		t.Fatalf("%+v", st)
	}
	if st := stepMedians([]*StepFigure{{SettleMs: 3, EgressSettleMs: 2}, {SettleMs: 9}, {SettleMs: 4, EgressSettleMs: -1}}); st.SettleMs != 9 || st.EgressSettleMs != -1 {
		t.Fatalf("worst settle %v, want 9", st.SettleMs)
	}
}
