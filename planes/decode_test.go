package planes

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// aliasBomb returns a topology whose one endpoint lists a port mapping
// aliased n times, and whose endpoints list that endpoint aliased n times:
// a few kilobytes that name n×n ports.
func aliasBomb(n int) string {
	var b strings.Builder
	b.WriteString("planes: [{name: p0}]\n")
	b.WriteString("switches: [{name: s0, plane: p0, gnmi: {address: 'h:1', insecure: true}}]\n")
	b.WriteString("endpoints:\n  - &e\n    name: a\n    ports: [&p {plane: p0, address: 10.0.0.1, switch: s0, interface: E0}")
	b.WriteString(strings.Repeat(", *p", n-1) + "]\n")
	b.WriteString(strings.Repeat("  - *e\n", n-1))
	return b.String()
}

func TestParseTopologyRefusesAliasBomb(t *testing.T) {
	for _, n := range []int{500, 700} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			doc := aliasBomb(n)
			_, visited, err := parseTopology([]byte(doc))
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("error %v, want a ValidationError", err)
			}
			// The budget: the document holds about 2n nodes, so the
			// floor applies; the walk stops one node past it.
			if visited > minNodeBudget+1 {
				t.Fatalf("walked %d nodes of a %d-byte document, want at most %d", visited, len(doc), minNodeBudget+1)
			}
			last := verr.Fields[len(verr.Fields)-1]
			if !strings.Contains(last.Message, "through YAML aliases") || !strings.HasPrefix(last.Field, "endpoints[") || last.Line == 0 {
				t.Fatalf("last error %+v, want the alias bound with an endpoints field and a line", last)
			}
		})
	}
}

// A document with many errors is refused after maxFieldErrors of them,
// without walking the rest.
func TestParseTopologyStopsAtErrorBound(t *testing.T) {
	var b strings.Builder
	b.WriteString("planes: [{name: p0}]\nendpoints:\n")
	for i := range 5000 {
		fmt.Fprintf(&b, "  - {name: e%d, mtu: 1}\n", i)
	}
	_, visited, err := parseTopology([]byte(b.String()))
	var verr *ValidationError
	if !errors.As(err, &verr) || len(verr.Fields) != maxFieldErrors {
		t.Fatalf("error %v, want %d field errors", err, maxFieldErrors)
	}
	// Each endpoint is 5 nodes walked (mapping, 2 keys, name): 50 of them.
	if visited > 10*maxFieldErrors {
		t.Fatalf("walked %d nodes after %d errors, want decoding to stop", visited, maxFieldErrors)
	}
}

func TestParseTopologyAliasesAndMergeKeys(t *testing.T) {
	doc := `planes: [{name: p0}, {name: p1}]
switches:
  - {name: s0, plane: p0, gnmi: &g {address: 'h:1', insecure: true}}
  - {name: s1, plane: p1, gnmi: {<<: *g, address: 'h:2'}}
  - {name: s2, plane: p1, gnmi: *g}
endpoints:
  - name: a
    ports:
      - &port {switch: s0, plane: p0, speed_bps: 100, interface: E0, address: 10.0.0.1}
      - {<<: [{switch: s1, plane: p1}, *port], address: 10.0.1.1}
  - name: b
    ports:
      - {<<: *port, interface: E1, address: 10.0.0.2}
      - {<<: [{switch: s1, plane: p1}, *port], interface: E1, address: 10.0.1.2, speed_bps: 5}
`
	topo, err := ParseTopology([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if got := topo.Switches[1].GNMI; got.Address != "h:2" || !got.Insecure {
		t.Fatalf("s1 gnmi = %+v, want the merged insecure with its own address", got)
	}
	if got := topo.Switches[2].GNMI; got.Address != "h:1" || !got.Insecure {
		t.Fatalf("s2 gnmi = %+v, want the aliased mapping", got)
	}
	a, b := topo.Endpoints[0].Ports, topo.Endpoints[1].Ports
	if a[1].Switch != "s1" || a[1].Interface != "E0" || a[1].SpeedBps != 100 {
		t.Fatalf("endpoint a port 1 = %+v, want s1 from the first merged mapping, the rest from *port", a[1])
	}
	if b[0].Switch != "s0" || b[0].Interface != "E1" || b[1].Plane != "p1" || b[1].SpeedBps != 5 {
		t.Fatalf("endpoint b ports = %+v, want merged defaults with the mapping's own keys winning", b)
	}
	// A merged key is still checked like any other.
	bad := strings.Replace(doc, "{switch: s1, plane: p1}", "{switch: s1, plane: p1, mtu: 9000}", 1)
	var verr *ValidationError
	if _, err := ParseTopology([]byte(bad)); !errors.As(err, &verr) || verr.Fields[0].Field != "endpoints[0].ports[1].mtu" {
		t.Fatalf("error %v, want endpoints[0].ports[1].mtu unknown", err)
	}
}
