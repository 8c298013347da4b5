package planes

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ValidName reports whether s is a valid plane, switch, endpoint or class name.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// Bounds of topology fields (docs/topology.md). Lengths are in bytes of
// UTF-8. Names (planes, switches, endpoints) are at most 63 ASCII characters
// (ValidName).
const (
	MaxDescriptionLen = 1024 // planes[].description, endpoints[].description
	MaxGNMIAddressLen = 261  // host (at most 253) ":" port
	MaxUsernameLen    = 256  // gnmi.username
	MaxPasswordEnvLen = 128  // gnmi.password_env, prefix included
	MaxFilePathLen    = 4096 // gnmi.tls.ca, cert, key (PATH_MAX)
	MaxServerNameLen  = 253  // gnmi.tls.server_name (a DNS name)
	MaxInterfaceLen   = 128  // ports[].interface
	// MaxSpeedBps bounds ports[].speed_bps (100 Tbit/s): far above any
	// port, far below the bigint column, so sums over a plane cannot
	// overflow int64.
	MaxSpeedBps int64 = 100_000_000_000_000
	// MaxPlanes is the most planes one fabric may have (the transport's
	// limit, transport.MaxPlanes).
	MaxPlanes = 64
)

// PasswordEnvPrefix is the prefix every gnmi.password_env must carry: a
// topology may name only fabricd's environment variables meant for gNMI
// passwords, never any other (a database URL, a token) to be sent to a
// switch address the topology chooses.
const PasswordEnvPrefix = "FABRICD_GNMI_"

var broadcast4 = netip.AddrFrom4([4]byte{255, 255, 255, 255})

var passwordEnvRE = regexp.MustCompile(`^` + PasswordEnvPrefix + `[A-Z0-9_]+$`)

// validate checks every field's content, references and uniqueness; field
// paths match the decoder's. It does not trust the decoder: a Topology built
// in Go gets the same checks.
func validate(t *Topology) []FieldError {
	var errs []FieldError
	fail := func(field, format string, args ...any) {
		if len(errs) < maxFieldErrors {
			errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
		}
	}
	text := func(field, value string, maxBytes int, multiline bool) bool {
		if msg := textProblem(value, maxBytes, multiline); msg != "" {
			fail(field, "%s", msg)
			return false
		}
		return true
	}
	checkName := func(field, name string) {
		switch {
		case name == "":
			fail(field, "is required")
		case !nameRE.MatchString(name):
			fail(field, "%s is not a valid name (letters, digits, '.', '_', '-'; at most 63)", quote(name))
		}
	}

	if len(t.Planes) == 0 {
		fail("planes", "at least one plane is required")
	}
	if len(t.Planes) > MaxPlanes {
		fail("planes", "%d planes, at most %d", len(t.Planes), MaxPlanes)
	}
	planes := map[string]bool{}
	for i, p := range t.Planes {
		f := fmt.Sprintf("planes[%d]", i)
		checkName(f+".name", p.Name)
		if planes[p.Name] {
			fail(f+".name", "duplicate plane %s", quote(p.Name))
		}
		planes[p.Name] = true
		text(f+".description", p.Description, MaxDescriptionLen, true)
	}

	switches := map[string]Switch{}
	for i, s := range t.Switches {
		f := fmt.Sprintf("switches[%d]", i)
		checkName(f+".name", s.Name)
		if _, dup := switches[s.Name]; dup {
			fail(f+".name", "duplicate switch %s", quote(s.Name))
		}
		switches[s.Name] = s
		if s.Plane == "" {
			fail(f+".plane", "is required")
		} else if !planes[s.Plane] {
			fail(f+".plane", "unknown plane %s", quote(s.Plane))
		}
		validateGNMI(f+".gnmi", s.GNMI, fail, text)
	}

	addrs := map[string]string{}   // address → field that declared it
	cabled := map[string]string{}  // switch:interface → field
	endpoints := map[string]bool{} // names
	for i, e := range t.Endpoints {
		f := fmt.Sprintf("endpoints[%d]", i)
		checkName(f+".name", e.Name)
		if endpoints[e.Name] {
			fail(f+".name", "duplicate endpoint %s", quote(e.Name))
		}
		endpoints[e.Name] = true
		text(f+".description", e.Description, MaxDescriptionLen, true)
		onPlane := map[string]bool{}
		for j, p := range e.Ports {
			pf := fmt.Sprintf("%s.ports[%d]", f, j)
			switch {
			case p.Plane == "":
				fail(pf+".plane", "is required")
			case !planes[p.Plane]:
				fail(pf+".plane", "unknown plane %s", quote(p.Plane))
			case onPlane[p.Plane]:
				fail(pf+".plane", "endpoint %s has more than one port on plane %s", quote(e.Name), quote(p.Plane))
			}
			onPlane[p.Plane] = true
			switch {
			case !p.Address.IsValid():
				fail(pf+".address", "is required")
			case p.Address.Zone() != "":
				fail(pf+".address", "%s has a zone; give the address alone", p.Address)
			case p.Address.Is4In6():
				fail(pf+".address", "%s is IPv4-mapped; give the IPv4 address", p.Address)
			case p.Address.IsUnspecified() || p.Address.IsMulticast() || p.Address == broadcast4:
				fail(pf+".address", "%s is not a unicast address", p.Address)
			default:
				if prev, dup := addrs[p.Address.String()]; dup {
					fail(pf+".address", "duplicate address %s (also at %s)", p.Address, prev)
				} else {
					addrs[p.Address.String()] = pf + ".address"
				}
			}
			sw, ok := switches[p.Switch]
			switch {
			case p.Switch == "":
				fail(pf+".switch", "is required")
			case !ok:
				fail(pf+".switch", "unknown switch %s", quote(p.Switch))
			case p.Plane != "" && sw.Plane != p.Plane:
				fail(pf+".switch", "switch %s is on plane %s, not %s", quote(p.Switch), quote(sw.Plane), quote(p.Plane))
			}
			switch {
			case p.Interface == "":
				fail(pf+".interface", "is required")
			case !text(pf+".interface", p.Interface, MaxInterfaceLen, false):
			default:
				if prev, dup := cabled[LinkName(p.Switch, p.Interface)]; dup && p.Switch != "" {
					fail(pf+".interface", "interface %s of switch %s is already cabled (at %s)", quote(p.Interface), quote(p.Switch), prev)
				} else {
					cabled[LinkName(p.Switch, p.Interface)] = pf + ".interface"
				}
			}
			if p.SpeedBps < 0 || p.SpeedBps > MaxSpeedBps {
				fail(pf+".speed_bps", "%d is outside 0-%d bit/s", p.SpeedBps, MaxSpeedBps)
			}
		}
		for _, pl := range t.Planes {
			if pl.Name != "" && !onPlane[pl.Name] {
				fail(f+".ports", "endpoint %s has no port on plane %s", quote(e.Name), quote(pl.Name))
			}
		}
	}
	return errs
}

func validateGNMI(f string, g GNMITarget, fail func(field, format string, args ...any),
	text func(field, value string, maxBytes int, multiline bool) bool) {
	switch {
	case g.Address == "":
		fail(f+".address", "is required")
	case !text(f+".address", g.Address, MaxGNMIAddressLen, false):
	default:
		if host, port, err := net.SplitHostPort(g.Address); err != nil || host == "" {
			fail(f+".address", "%s is not host:port", quote(g.Address))
		} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			fail(f+".address", "port %s is not 1-65535", quote(port))
		}
	}
	switch {
	case g.Insecure && g.TLS != nil:
		fail(f+".tls", "set either insecure: true or tls, not both")
	case !g.Insecure && g.TLS == nil:
		fail(f, "set insecure: true or a tls block")
	}
	if g.TLS != nil {
		text(f+".tls.ca", g.TLS.CA, MaxFilePathLen, false)
		text(f+".tls.cert", g.TLS.Cert, MaxFilePathLen, false)
		text(f+".tls.key", g.TLS.Key, MaxFilePathLen, false)
		text(f+".tls.server_name", g.TLS.ServerName, MaxServerNameLen, false)
		if (g.TLS.Cert == "") != (g.TLS.Key == "") {
			fail(f+".tls", "cert and key go together (mTLS)")
		}
	}
	text(f+".username", g.Username, MaxUsernameLen, false)
	if g.PasswordEnv != "" {
		switch {
		case len(g.PasswordEnv) > MaxPasswordEnvLen:
			fail(f+".password_env", "is %d bytes long, at most %d", len(g.PasswordEnv), MaxPasswordEnvLen)
		case !passwordEnvRE.MatchString(g.PasswordEnv):
			fail(f+".password_env", "%s is not an allowed variable name: it must start with %s, then upper-case letters, digits or '_'",
				quote(g.PasswordEnv), PasswordEnvPrefix)
		case g.Username == "":
			fail(f+".password_env", "needs a username")
		case g.TLS == nil && !g.AllowPlaintextPassword:
			fail(f+".password_env", "would send the password without TLS: use a tls block, or set allow_plaintext_password: true")
		}
	}
	if g.AllowPlaintextPassword && (g.TLS != nil || g.PasswordEnv == "") {
		fail(f+".allow_plaintext_password", "only applies to a password (password_env) over insecure: true")
	}
}
