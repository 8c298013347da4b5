package planes

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCollectorExportsPlaneAndLinkGauges(t *testing.T) {
	h := newHarness(t, nil)
	// 8 links of 100 bit/s on p0: one carries 50 bit/s out with 1 in 100
	// packets discarded and 1 in 4 marked; one is down.
	h.rates("s0", "E0", InterfaceRates{OutOctets: 50.0 / 8, InPkts: 100, OutPkts: 100, OutDiscards: 2, ECNMarked: 25})
	h.oper("s0", "E1", OperDown)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(h.e.Collector())
	want := `
# HELP multiplane_planes_ecn_ratio ECN-marked output packets per output packet on a plane's links.
# TYPE multiplane_planes_ecn_ratio gauge
multiplane_planes_ecn_ratio{plane="p0"} 0.25
multiplane_planes_ecn_ratio{plane="p1"} 0
# HELP multiplane_planes_loss_ratio Errors and discards per packet on a plane's links, from the latest counter rates.
# TYPE multiplane_planes_loss_ratio gauge
multiplane_planes_loss_ratio{plane="p0"} 0.01
multiplane_planes_loss_ratio{plane="p1"} 0
# HELP multiplane_planes_utilization_ratio Traffic of a plane over its usable capacity, from the switches' latest counter rates.
# TYPE multiplane_planes_utilization_ratio gauge
multiplane_planes_utilization_ratio{plane="p0"} 0.07142857142857142
multiplane_planes_utilization_ratio{plane="p1"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "multiplane_planes_utilization_ratio",
		"multiplane_planes_loss_ratio", "multiplane_planes_ecn_ratio"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(h.e.Collector(), "multiplane_planes_link_state"); n != 1 {
		t.Fatalf("%d link_state series, want one per link not up (1 of 16)", n)
	}
	mfs, _ := reg.Gather()
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "multiplane_planes_link_state" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	if len(got) != 1 || got["s0:E1"] != 2 {
		t.Fatalf("link states %v, want s0:E1 down (2) and no series for the links up", got)
	}
}

// Rates in JSON carry their units: per second, the interval in seconds.
func TestInterfaceRatesJSON(t *testing.T) {
	r := InterfaceRates{Interval: 1500 * time.Millisecond, InOctets: 125, ECNMarked: 2}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"interval_seconds":1.5`, `"in_octets_per_second":125`, `"ecn_marked_pkts_per_second":2`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("%s lacks %s", data, want)
		}
	}
	var back InterfaceRates
	if err := json.Unmarshal(data, &back); err != nil || back != r {
		t.Fatalf("round trip: %+v, %v; want %+v", back, err, r)
	}
}

// A scrape does not hold the engine while it sends its series: telemetry
// (the write lock) goes on while a slow scraper reads.
func TestCollectDoesNotHoldTheEngine(t *testing.T) {
	h := newHarness(t, nil)
	ch := make(chan prometheus.Metric) // a scraper that reads one series and stalls
	go func() {
		h.e.Collector().Collect(ch)
		close(ch)
	}()
	<-ch
	done := make(chan struct{})
	go func() {
		h.oper("s0", "E3", OperDown) // takes the write lock
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("telemetry waited for a stalled scrape: Collect holds the engine's lock while sending")
	}
	for range ch { // the scrape ends
	}
}
