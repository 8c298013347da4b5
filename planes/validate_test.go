package planes

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// full is a valid topology in which every optional field is set, so a walk
// over it reaches every field of the topology types.
func full() *Topology {
	return &Topology{
		Planes: []Plane{{Name: "p0", Description: "plane 0"}, {Name: "p1", Description: "plane 1"}},
		Switches: []Switch{
			{Name: "s0", Plane: "p0", GNMI: GNMITarget{Address: "127.0.0.1:9339", Insecure: true,
				Username: "telemetry", PasswordEnv: "FABRICD_GNMI_S0", AllowPlaintextPassword: true}},
			{Name: "s1", Plane: "p1", GNMI: GNMITarget{Address: "sw1.example:9339",
				TLS:      &TLSConfig{CA: "/etc/ca.pem", Cert: "/etc/c.pem", Key: "/etc/c.key", ServerName: "sw1"},
				Username: "telemetry", PasswordEnv: "FABRICD_GNMI_S1"}},
		},
		Endpoints: []Endpoint{{Name: "a", Description: "rack 1", Ports: []Port{
			{Plane: "p0", Address: netip.MustParseAddr("10.0.0.1"), Switch: "s0", Interface: "Ethernet1/1", SpeedBps: 400e9},
			{Plane: "p1", Address: netip.MustParseAddr("fd00::1"), Switch: "s1", Interface: "Ethernet1/1", SpeedBps: 400e9},
		}}},
	}
}

// leaf is one string or integer field of a topology, by its field path.
type leaf struct {
	path string
	v    reflect.Value
}

// leaves walks every exported string and integer field reachable from v,
// naming each by the path the validator reports (JSON names, [i] indexes).
func leaves(v reflect.Value, path string) []leaf {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return leaves(v.Elem(), path)
	case reflect.Slice:
		var out []leaf
		for i := 0; i < v.Len(); i++ {
			out = append(out, leaves(v.Index(i), fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	case reflect.Struct:
		if v.Type().PkgPath() != reflect.TypeFor[Topology]().PkgPath() {
			return nil // netip.Addr: parsed, not free text
		}
		var out []leaf
		for i := 0; i < v.NumField(); i++ {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			sub := name
			if path != "" {
				sub = path + "." + name
			}
			out = append(out, leaves(v.Field(i), sub)...)
		}
		return out
	case reflect.String, reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint32, reflect.Uint64:
		return []leaf{{path, v}}
	}
	return nil
}

func hasFieldError(errs []FieldError, field string) bool {
	for _, fe := range errs {
		if fe.Field == field {
			return true
		}
	}
	return false
}

// TestValidateEveryField sets each string field of a full topology to
// hostile text and each integer to out-of-range values, and wants an error
// naming exactly that field. A field added to the topology types without a
// check fails here.
func TestValidateEveryField(t *testing.T) {
	if errs := validate(full()); len(errs) > 0 {
		t.Fatalf("full topology is invalid: %v", errs)
	}
	strs := map[string]string{
		"NUL":           "a\x00b",
		"invalid UTF-8": "a\xffb",
		"control":       "a\x1bb",
		"over-long":     strings.Repeat("a", 1<<16),
	}
	ints := map[string]int64{"negative": -1, "above bound": MaxSpeedBps + 1, "max int64": math.MaxInt64}
	n := 0
	for _, l := range leaves(reflect.ValueOf(full()), "") {
		switch l.v.Kind() {
		case reflect.String:
			for name, bad := range strs {
				t.Run(l.path+"/"+name, func(t *testing.T) {
					topo := full()
					leafAt(t, topo, l.path).SetString(bad)
					if errs := validate(topo); !hasFieldError(errs, l.path) {
						t.Fatalf("no error for %s = %.20q: %v", l.path, bad, errs)
					}
				})
				n++
			}
		default:
			for name, bad := range ints {
				t.Run(l.path+"/"+name, func(t *testing.T) {
					topo := full()
					leafAt(t, topo, l.path).SetInt(bad)
					if errs := validate(topo); !hasFieldError(errs, l.path) {
						t.Fatalf("no error for %s = %d: %v", l.path, bad, errs)
					}
				})
				n++
			}
		}
	}
	if n < 50 {
		t.Fatalf("walked only %d cases: the walk misses fields", n)
	}
}

func leafAt(t *testing.T, topo *Topology, path string) reflect.Value {
	for _, l := range leaves(reflect.ValueOf(topo), "") {
		if l.path == path {
			return l.v
		}
	}
	t.Fatalf("no field %s", path)
	return reflect.Value{}
}

// TestParseTopologyFieldChecks: hostile values through the parser, with the
// field and line each error names.
func TestParseTopologyFieldChecks(t *testing.T) {
	sw := func(gnmi string) string {
		return strings.Replace(small, `gnmi: {address: "127.0.0.1:9339", insecure: true}`, "gnmi: "+gnmi, 1)
	}
	long := strings.Repeat("x", MaxDescriptionLen+1)
	tests := []struct {
		name, doc, field string
		line             int
		msg              string
	}{
		{"description NUL", strings.Replace(small, "- name: p0\n", "- name: p0\n    description: \"a\\0b\"\n", 1), "planes[0].description", 3, "NUL"},
		{"description too long", strings.Replace(small, "- name: p0\n", "- name: p0\n    description: "+long+"\n", 1), "planes[0].description", 3, "at most 1024"},
		{"description multi-line ok", strings.Replace(small, "- name: a\n", "- name: a\n    description: \"rack 1\\nslot 3\"\n", 1), "", 0, ""},
		{"endpoint description control", strings.Replace(small, "- name: a\n", "- name: a\n    description: \"a\\x07\"\n", 1), "endpoints[0].description", 15, "control character"},
		{"interface NUL", strings.Replace(small, "interface: E0}", `interface: "E\u0000"}`, 1), "endpoints[0].ports[0].interface", 16, "NUL"},
		{"interface newline", strings.Replace(small, "interface: E0}", `interface: "E\n0"}`, 1), "endpoints[0].ports[0].interface", 16, "control character"},
		{"interface too long", strings.Replace(small, "interface: E0}", "interface: "+strings.Repeat("E", MaxInterfaceLen+1)+"}", 1), "endpoints[0].ports[0].interface", 16, "at most 128"},
		{"username NUL", sw(`{address: "h:1", insecure: true, username: "u\0"}`), "switches[0].gnmi.username", 7, "NUL"},
		{"address NUL", sw(`{address: "h\0:1", insecure: true}`), "switches[0].gnmi.address", 7, "NUL"},
		{"address port range", sw(`{address: "h:65536", insecure: true}`), "switches[0].gnmi.address", 7, "1-65535"},
		{"tls ca NUL", sw(`{address: "h:1", tls: {ca: "/a\0"}}`), "switches[0].gnmi.tls.ca", 7, "NUL"},
		{"server name too long", sw(`{address: "h:1", tls: {server_name: ` + strings.Repeat("a", MaxServerNameLen+1) + `}}`), "switches[0].gnmi.tls.server_name", 7, "at most 253"},
		{"speed negative", strings.Replace(small, "interface: E0}", "interface: E0, speed_bps: -1}", 1), "endpoints[0].ports[0].speed_bps", 16, "from 0 to"},
		{"speed beyond int64", strings.Replace(small, "interface: E0}", "interface: E0, speed_bps: 9223372036854775808}", 1), "endpoints[0].ports[0].speed_bps", 16, "from 0 to"},
		{"speed beyond bound", strings.Replace(small, "interface: E0}", "interface: E0, speed_bps: 100000000000001}", 1), "endpoints[0].ports[0].speed_bps", 16, "outside 0-"},
		{"speed at bound", strings.Replace(small, "interface: E0}", "interface: E0, speed_bps: 100000000000000}", 1), "", 0, ""},
		{"broadcast address", strings.Replace(small, "10.0.0.1", "255.255.255.255", 1), "endpoints[0].ports[0].address", 16, "not a unicast"},
		{"unspecified address", strings.Replace(small, "10.0.0.1", `"::"`, 1), "endpoints[0].ports[0].address", 16, "not a unicast"},
		{"unknown key with NUL", strings.Replace(small, "interface: E0}", `interface: E0, "m\0": 1}`, 1), `endpoints[0].ports[0]."m\x00"`, 16, "unknown field"},
		{"too many planes", "planes: [" + strings.Repeat("{name: x},", MaxPlanes+1) + "]\n", "planes", 1, "at most 64"},
		// Finding 8: password_env names only gNMI password variables, and
		// a password goes over plaintext only when the entry says so.
		{"password env outside prefix", sw(`{address: "h:1", tls: {}, username: u, password_env: DATABASE_URL}`), "switches[0].gnmi.password_env", 7, "must start with FABRICD_GNMI_"},
		{"password env prefix only", sw(`{address: "h:1", tls: {}, username: u, password_env: FABRICD_GNMI_}`), "switches[0].gnmi.password_env", 7, "must start with FABRICD_GNMI_"},
		{"password env lower case", sw(`{address: "h:1", tls: {}, username: u, password_env: FABRICD_GNMI_pw}`), "switches[0].gnmi.password_env", 7, "upper-case"},
		{"password env ok over tls", sw(`{address: "h:1", tls: {}, username: u, password_env: FABRICD_GNMI_SW0}`), "", 0, ""},
		{"password env needs username", sw(`{address: "h:1", tls: {}, password_env: FABRICD_GNMI_SW0}`), "switches[0].gnmi.password_env", 7, "needs a username"},
		{"plaintext password refused", sw(`{address: "h:1", insecure: true, username: u, password_env: FABRICD_GNMI_SW0}`), "switches[0].gnmi.password_env", 7, "allow_plaintext_password: true"},
		{"plaintext password allowed", sw(`{address: "h:1", insecure: true, username: u, password_env: FABRICD_GNMI_SW0, allow_plaintext_password: true}`), "", 0, ""},
		{"allow plaintext with tls", sw(`{address: "h:1", tls: {}, username: u, password_env: FABRICD_GNMI_SW0, allow_plaintext_password: true}`), "switches[0].gnmi.allow_plaintext_password", 7, "only applies"},
		{"allow plaintext not a bool", sw(`{address: "h:1", insecure: true, allow_plaintext_password: 1}`), "switches[0].gnmi.allow_plaintext_password", 7, "true or false"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTopology([]byte(tc.doc))
			if tc.field == "" {
				if err != nil {
					t.Fatalf("ParseTopology: %v", err)
				}
				return
			}
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("error %v is not *ValidationError", err)
			}
			for _, fe := range verr.Fields {
				if fe.Field == tc.field && fe.Line == tc.line && strings.Contains(fe.Message, tc.msg) {
					assertStorable(t, fe)
					return
				}
			}
			t.Fatalf("no error for field %q line %d containing %q; got %v", tc.field, tc.line, tc.msg, verr.Fields)
		})
	}
}

// assertStorable fails when an error's text could not be stored (the audit
// log keeps it) or is unbounded.
func assertStorable(t *testing.T, fe FieldError) {
	t.Helper()
	for _, s := range []string{fe.Field, fe.Message} {
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) || len(s) > 512 {
			t.Fatalf("error text not storable: %.80q (%d bytes)", s, len(s))
		}
	}
}

func TestCheckText(t *testing.T) {
	tests := []struct {
		fn    func(field, value string, maxBytes int) error
		value string
		max   int
		msg   string // "" = accepted
	}{
		{CheckText, "rack 1\nslot\t3", 20, ""},
		{CheckText, "", 0, ""},
		{CheckText, "héllo", 6, ""},
		{CheckText, "héllo", 5, "at most 5"},
		{CheckText, "a\x00", 10, "NUL"},
		{CheckText, "a\xc3", 10, "UTF-8"},
		{CheckText, "a\u0085", 10, "control character U+0085"},
		{CheckText, "a\x7f", 10, "control character"},
		{CheckLine, "Ethernet1/1", 20, ""},
		{CheckLine, "a\tb", 10, "control character U+0009"},
		{CheckLine, "a\nb", 10, "control character U+000A"},
	}
	for _, tc := range tests {
		err := tc.fn("f.x", tc.value, tc.max)
		if tc.msg == "" {
			if err != nil {
				t.Errorf("%q (max %d): %v", tc.value, tc.max, err)
			}
			continue
		}
		var fe FieldError
		if !errors.As(err, &fe) || fe.Field != "f.x" || !strings.Contains(fe.Message, tc.msg) {
			t.Errorf("%q (max %d) = %v, want a FieldError for f.x containing %q", tc.value, tc.max, err, tc.msg)
		}
	}
}

func ExampleCheckText() {
	fmt.Println(CheckText("reason", "maintenance\x00", 256))
	fmt.Println(CheckText("reason", "maintenance", 256))
	// Output:
	// reason: contains a NUL character
	// <nil>
}
