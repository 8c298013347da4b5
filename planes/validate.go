package planes

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ValidName reports whether s is a valid plane, switch, endpoint or class name.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// validate checks references and uniqueness; field paths match the decoder's.
func validate(t *Topology) []FieldError {
	var errs []FieldError
	fail := func(field, format string, args ...any) {
		if len(errs) < maxFieldErrors {
			errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
		}
	}
	checkName := func(field, name string) {
		switch {
		case name == "":
			fail(field, "is required")
		case !nameRE.MatchString(name):
			fail(field, "%q is not a valid name (letters, digits, '.', '_', '-'; at most 63)", name)
		}
	}

	if len(t.Planes) == 0 {
		fail("planes", "at least one plane is required")
	}
	planes := map[string]bool{}
	for i, p := range t.Planes {
		f := fmt.Sprintf("planes[%d].name", i)
		checkName(f, p.Name)
		if planes[p.Name] {
			fail(f, "duplicate plane %q", p.Name)
		}
		planes[p.Name] = true
	}

	switches := map[string]Switch{}
	for i, s := range t.Switches {
		f := fmt.Sprintf("switches[%d]", i)
		checkName(f+".name", s.Name)
		if _, dup := switches[s.Name]; dup {
			fail(f+".name", "duplicate switch %q", s.Name)
		}
		switches[s.Name] = s
		if s.Plane == "" {
			fail(f+".plane", "is required")
		} else if !planes[s.Plane] {
			fail(f+".plane", "unknown plane %q", s.Plane)
		}
		validateGNMI(f+".gnmi", s.GNMI, fail)
	}

	addrs := map[string]string{}   // address → field that declared it
	cabled := map[string]string{}  // switch:interface → field
	endpoints := map[string]bool{} // names
	for i, e := range t.Endpoints {
		f := fmt.Sprintf("endpoints[%d]", i)
		checkName(f+".name", e.Name)
		if endpoints[e.Name] {
			fail(f+".name", "duplicate endpoint %q", e.Name)
		}
		endpoints[e.Name] = true
		onPlane := map[string]bool{}
		for j, p := range e.Ports {
			pf := fmt.Sprintf("%s.ports[%d]", f, j)
			switch {
			case p.Plane == "":
				fail(pf+".plane", "is required")
			case !planes[p.Plane]:
				fail(pf+".plane", "unknown plane %q", p.Plane)
			case onPlane[p.Plane]:
				fail(pf+".plane", "endpoint %q has more than one port on plane %q", e.Name, p.Plane)
			}
			onPlane[p.Plane] = true
			if !p.Address.IsValid() {
				fail(pf+".address", "is required")
			} else if prev, dup := addrs[p.Address.String()]; dup {
				fail(pf+".address", "duplicate address %s (also at %s)", p.Address, prev)
			} else {
				addrs[p.Address.String()] = pf + ".address"
			}
			sw, ok := switches[p.Switch]
			switch {
			case p.Switch == "":
				fail(pf+".switch", "is required")
			case !ok:
				fail(pf+".switch", "unknown switch %q", p.Switch)
			case p.Plane != "" && sw.Plane != p.Plane:
				fail(pf+".switch", "switch %q is on plane %q, not %q", p.Switch, sw.Plane, p.Plane)
			}
			if p.Interface == "" {
				fail(pf+".interface", "is required")
			} else if prev, dup := cabled[LinkName(p.Switch, p.Interface)]; dup && p.Switch != "" {
				fail(pf+".interface", "interface %s of switch %q is already cabled (at %s)", p.Interface, p.Switch, prev)
			} else {
				cabled[LinkName(p.Switch, p.Interface)] = pf + ".interface"
			}
		}
		for _, pl := range t.Planes {
			if pl.Name != "" && !onPlane[pl.Name] {
				fail(f+".ports", "endpoint %q has no port on plane %q", e.Name, pl.Name)
			}
		}
	}
	return errs
}

func validateGNMI(f string, g GNMITarget, fail func(field, format string, args ...any)) {
	if g.Address == "" {
		fail(f+".address", "is required")
	} else if host, port, err := net.SplitHostPort(g.Address); err != nil || host == "" {
		fail(f+".address", "%q is not host:port", g.Address)
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		fail(f+".address", "port %q is not 1-65535", port)
	}
	switch {
	case g.Insecure && g.TLS != nil:
		fail(f+".tls", "set either insecure: true or tls, not both")
	case !g.Insecure && g.TLS == nil:
		fail(f, "set insecure: true or a tls block")
	}
	if g.TLS != nil && (g.TLS.Cert == "") != (g.TLS.Key == "") {
		fail(f+".tls", "cert and key go together (mTLS)")
	}
	if g.PasswordEnv != "" && g.Username == "" {
		fail(f+".password_env", "needs a username")
	}
}
