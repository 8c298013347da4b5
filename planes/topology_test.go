package planes

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

const small = `planes:
  - name: p0
  - name: p1
switches:
  - name: s0
    plane: p0
    gnmi: {address: "127.0.0.1:9339", insecure: true}
  - name: s1
    plane: p1
    gnmi:
      address: "sw1.example:9339"
      tls: {ca: /etc/ca.pem}
endpoints:
  - name: a
    ports:
      - {plane: p0, address: 10.0.0.1, switch: s0, interface: E0}
      - {plane: p1, address: 10.0.1.1, switch: s1, interface: E0}
`

func TestParseExampleTopology(t *testing.T) {
	data, err := os.ReadFile("../examples/topology.yaml")
	if err != nil {
		t.Fatal(err)
	}
	topo, err := ParseTopology(data)
	if err != nil {
		t.Fatalf("example topology: %v", err)
	}
	if len(topo.Planes) != 4 || len(topo.Switches) != 4 || len(topo.Endpoints) != 8 {
		t.Fatalf("got %d planes, %d switches, %d endpoints; want 4, 4, 8", len(topo.Planes), len(topo.Switches), len(topo.Endpoints))
	}
	if n := len(topo.Links()); n != 32 {
		t.Fatalf("links = %d, want 32", n)
	}
}

func TestParseTopologyJSON(t *testing.T) {
	js := `{"planes":[{"name":"p0"}],"switches":[{"name":"s0","plane":"p0","gnmi":{"address":"h:1","insecure":true}}],
	"endpoints":[{"name":"a","ports":[{"plane":"p0","address":"fd00::1","switch":"s0","interface":"E1"}]}]}`
	topo, err := ParseTopology([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if got := topo.Endpoints[0].Ports[0].Address.String(); got != "fd00::1" {
		t.Fatalf("address = %s", got)
	}
}

func TestParseTopologyErrors(t *testing.T) {
	tests := []struct {
		name      string
		doc       string
		field     string
		line      int
		msgSubstr string
	}{
		{"empty", ``, "(document)", 0, "empty document"},
		{"malformed yaml", "planes: [\n", "(document)", 0, "malformed"},
		{"malformed json", `{"planes": [}`, "(document)", 0, "malformed"},
		{"duplicate key", "planes: []\nplanes: []\n", "planes", 2, "more than once"},
		{"unknown top field", "planes: [{name: p0}]\nswitchez: []\n", "switchez", 2, "unknown field"},
		{"unknown nested field", strings.Replace(small, "interface: E0}", "interface: E0, mtu: 9000}", 1), "endpoints[0].ports[0].mtu", 16, "unknown field"},
		{"wrong type", strings.Replace(small, "insecure: true", "insecure: yes please", 1), "switches[0].gnmi.insecure", 7, "true or false"},
		{"unknown plane", strings.Replace(small, "{plane: p1, address", "{plane: p9, address", 1), "endpoints[0].ports[1].plane", 17, `unknown plane "p9"`},
		{"missing switch", strings.Replace(small, "switch: s1", "switch: s9", 1), "endpoints[0].ports[1].switch", 17, `unknown switch "s9"`},
		{"switch on other plane", strings.Replace(small, "switch: s1", "switch: s0", 1), "endpoints[0].ports[1].switch", 17, "is on plane"},
		{"duplicate address", strings.Replace(small, "10.0.1.1", "10.0.0.1", 1), "endpoints[0].ports[1].address", 17, "duplicate address"},
		{"bad address", strings.Replace(small, "10.0.1.1", "10.0.1.x", 1), "endpoints[0].ports[1].address", 17, "not an IP"},
		{"missing plane port", strings.Replace(small, "      - {plane: p1, address: 10.0.1.1, switch: s1, interface: E0}\n", "", 1), "endpoints[0].ports", 15, `no port on plane "p1"`},
		{"duplicate plane", strings.Replace(small, "name: p1", "name: p0", 1), "planes[1].name", 3, "duplicate plane"},
		{"unknown switch plane", strings.Replace(small, "plane: p1\n    gnmi:", "plane: px\n    gnmi:", 1), "switches[1].plane", 9, "unknown plane"},
		{"gnmi neither", strings.Replace(small, ", insecure: true", "", 1), "switches[0].gnmi", 7, "insecure: true or a tls"},
		{"gnmi bad address", strings.Replace(small, "127.0.0.1:9339", "127.0.0.1", 1), "switches[0].gnmi.address", 7, "host:port"},
		{"bad name", strings.Replace(small, "name: a\n", "name: 'a b'\n", 1), "endpoints[0].name", 14, "not a valid name"},
		{"planes not a list", "planes: p0\n", "planes", 1, "must be a list"},
		{"no planes", "planes: []\n", "planes", 1, "at least one plane"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTopology([]byte(tc.doc))
			if err == nil {
				t.Fatal("ParseTopology succeeded, want error")
			}
			if !errors.Is(err, ErrInvalidTopology) {
				t.Fatalf("error %v is not ErrInvalidTopology", err)
			}
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("error %T is not *ValidationError", err)
			}
			for _, fe := range verr.Fields {
				if fe.Field == tc.field && (tc.line == 0 || fe.Line == tc.line) && strings.Contains(fe.Message, tc.msgSubstr) {
					return
				}
			}
			t.Fatalf("no error for field %q line %d containing %q; got %v", tc.field, tc.line, tc.msgSubstr, verr.Fields)
		})
	}
}

// FuzzParseTopology checks that what the parser accepts can be stored:
// every string valid UTF-8 without NUL (PostgreSQL text and jsonb refuse
// them), every integer within its column (bigint, non-negative) and bound;
// and that what it refuses comes with storable, bounded error text.
func FuzzParseTopology(f *testing.F) {
	f.Add([]byte(small))
	f.Add([]byte(`{"planes":[{"name":"p0"}]}`))
	f.Add([]byte(`{"planes":[{"name":"p0","description":"a\u0000b"}]}`))
	f.Add([]byte(strings.Replace(small, "interface: E0}", `interface: "E\x01", speed_bps: 9223372036854775807}`, 1)))
	f.Add([]byte(strings.Replace(small, "insecure: true}", `insecure: true, username: "u", password_env: FABRICD_GNMI_X, allow_plaintext_password: true}`, 1)))
	f.Add([]byte(aliasBomb(300)))
	f.Add([]byte(`{planes: [&p {name: p0}, {<<: *p, name: p1}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		topo, visited, err := parseTopology(data)
		if visited > max(minNodeBudget, nodeBudgetFactor*len(data))+1 {
			t.Fatalf("walked %d nodes of a %d-byte document", visited, len(data))
		}
		if err != nil {
			var verr *ValidationError
			if !errors.As(err, &verr) || len(verr.Fields) == 0 || len(verr.Fields) > maxFieldErrors {
				t.Fatalf("error %v: want a ValidationError with 1-%d fields", err, maxFieldErrors)
			}
			for _, fe := range verr.Fields {
				for _, s := range []string{fe.Field, fe.Message} {
					if !utf8.ValidString(s) || strings.ContainsRune(s, 0) || len(s) > 1024 {
						t.Fatalf("unstorable error text %.80q (%d bytes)", s, len(s))
					}
				}
			}
			return
		}
		if len(topo.Planes) == 0 {
			t.Fatal("accepted a topology without planes")
		}
		for _, l := range leaves(reflect.ValueOf(topo), "") {
			switch l.v.Kind() {
			case reflect.String:
				if s := l.v.String(); !utf8.ValidString(s) || strings.ContainsRune(s, 0) || len(s) > MaxFilePathLen {
					t.Fatalf("accepted %s = %.80q: not storable text", l.path, s)
				}
			default:
				if n := l.v.Int(); n < 0 || n > MaxSpeedBps {
					t.Fatalf("accepted %s = %d: outside 0-%d", l.path, n, MaxSpeedBps)
				}
			}
		}
		for _, e := range topo.Endpoints {
			for _, p := range e.Ports {
				if !p.Address.IsValid() || p.Address.Zone() != "" {
					t.Fatalf("accepted address %v: not storable as inet", p.Address)
				}
			}
		}
	})
}
