package planes

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Topology is the declared inventory of a fabric.
type Topology struct {
	Planes    []Plane    `json:"planes"`
	Switches  []Switch   `json:"switches"`
	Endpoints []Endpoint `json:"endpoints"`
}

// Plane is one independent network plane.
type Plane struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// Switch is a switch of one plane, reachable over gNMI.
type Switch struct {
	Name  string     `json:"name"`
	Plane string     `json:"plane"`
	GNMI  GNMITarget `json:"gnmi"`
}

// GNMITarget says how to reach a switch's gNMI server. Exactly one of
// Insecure and TLS is set. PasswordEnv names an environment variable of
// fabricd starting with PasswordEnvPrefix; its value is sent as the gNMI
// password, over TLS, or over plaintext only when AllowPlaintextPassword says
// so.
type GNMITarget struct {
	Address                string     `json:"address"`
	Insecure               bool       `json:"insecure,omitempty"`
	TLS                    *TLSConfig `json:"tls,omitempty"`
	Username               string     `json:"username,omitempty"`
	PasswordEnv            string     `json:"password_env,omitempty"`
	AllowPlaintextPassword bool       `json:"allow_plaintext_password,omitempty"`
}

// TLSConfig names PEM files for a TLS or mTLS gNMI session.
type TLSConfig struct {
	CA         string `json:"ca,omitempty"`
	Cert       string `json:"cert,omitempty"`
	Key        string `json:"key,omitempty"`
	ServerName string `json:"server_name,omitempty"`
}

// Endpoint is a host with one port on each plane.
type Endpoint struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Ports       []Port `json:"ports"`
}

// Port is an endpoint's NIC port on one plane, cabled to a switch interface.
type Port struct {
	Plane     string     `json:"plane"`
	Address   netip.Addr `json:"address"`
	Switch    string     `json:"switch"`
	Interface string     `json:"interface"`
	SpeedBps  int64      `json:"speed_bps,omitempty"`
}

// Link is the cable between a switch interface and an endpoint port.
type Link struct {
	Name      string     `json:"name"`
	Plane     string     `json:"plane"`
	Switch    string     `json:"switch"`
	Interface string     `json:"interface"`
	Endpoint  string     `json:"endpoint"`
	Address   netip.Addr `json:"address"`
	SpeedBps  int64      `json:"speed_bps"`
}

// LinkName is the stable name of the link on a switch interface.
func LinkName(sw, iface string) string { return sw + ":" + iface }

// Links derives the links of a topology, one per endpoint port, sorted by name.
func (t *Topology) Links() []Link {
	var links []Link
	for _, e := range t.Endpoints {
		for _, p := range e.Ports {
			links = append(links, Link{
				Name: LinkName(p.Switch, p.Interface), Plane: p.Plane, Switch: p.Switch,
				Interface: p.Interface, Endpoint: e.Name, Address: p.Address, SpeedBps: p.SpeedBps,
			})
		}
	}
	slices.SortFunc(links, func(a, b Link) int { return strings.Compare(a.Name, b.Name) })
	return links
}

// FieldError is one problem with a topology document.
type FieldError struct {
	Field   string `json:"field"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

func (e FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s", e.Line, e.Field, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Field, e.Message)
}

// ValidationError lists every problem found in a topology document.
type ValidationError struct {
	Fields []FieldError
}

func (e *ValidationError) Error() string {
	if len(e.Fields) == 1 {
		return "planes: invalid topology: " + e.Fields[0].Error()
	}
	msgs := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		msgs[i] = f.Error()
	}
	return fmt.Sprintf("planes: invalid topology: %d errors: %s", len(e.Fields), strings.Join(msgs, "; "))
}

// Unwrap lets errors.Is match ErrInvalidTopology.
func (e *ValidationError) Unwrap() error { return ErrInvalidTopology }
