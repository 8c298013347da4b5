package planes

import (
	"bytes"
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// maxFieldErrors bounds how many problems one document reports.
const maxFieldErrors = 50

// keyRE matches keys that may appear in a field path as they are.
var keyRE = regexp.MustCompile(`^[a-z_]{1,32}$`)

// ParseTopology decodes a YAML or JSON topology document strictly (unknown
// fields, wrong types and duplicate keys are errors) and validates it.
func ParseTopology(data []byte) (*Topology, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, &ValidationError{Fields: []FieldError{{Field: "(document)", Message: syntaxMessage(err)}}}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &ValidationError{Fields: []FieldError{{Field: "(document)", Line: extra.Line, Message: "more than one YAML document"}}}
	}
	d := &decoder{lines: map[string]int{}}
	t := d.topology(&doc)
	if len(d.errs) == 0 {
		for _, fe := range validate(t) {
			fe.Line = d.lineOf(fe.Field)
			d.errs = append(d.errs, fe)
		}
	}
	if len(d.errs) > 0 {
		return nil, &ValidationError{Fields: d.errs}
	}
	return t, nil
}

func syntaxMessage(err error) string {
	if err.Error() == "EOF" {
		return "empty document"
	}
	return "malformed document: " + err.Error()
}

// decoder walks a YAML node tree, collecting errors with field paths and lines.
type decoder struct {
	errs  []FieldError
	lines map[string]int // field path → line, for validation errors
}

func (d *decoder) fail(n *yaml.Node, field, format string, args ...any) {
	if len(d.errs) >= maxFieldErrors {
		return
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, FieldError{Field: field, Line: line, Message: fmt.Sprintf(format, args...)})
}

// lineOf returns the line of a field path, or of its nearest decoded parent.
func (d *decoder) lineOf(path string) int {
	for path != "" {
		if l, ok := d.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// mapping calls fields[key] for each key of a mapping node; unknown keys are errors.
func (d *decoder) mapping(n *yaml.Node, path string, fields map[string]func(v *yaml.Node, path string)) {
	n = resolve(n)
	d.lines[path] = n.Line
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "must be a mapping")
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		if _, known := fields[key]; !known && !keyRE.MatchString(key) {
			// An unknown key goes into the error's field path: keep
			// that path storable and short whatever the key holds.
			key = quote(key)
		}
		sub := key
		if path != "" {
			sub = path + "." + key
		}
		d.lines[sub] = k.Line
		if seen[key] {
			d.fail(k, sub, "field given more than once")
			continue
		}
		seen[key] = true
		f, ok := fields[key]
		if !ok {
			d.fail(k, sub, "unknown field")
			continue
		}
		f(v, sub)
	}
}

func (d *decoder) sequence(n *yaml.Node, path string, each func(item *yaml.Node, path string)) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "must be a list")
		return
	}
	for i, item := range n.Content {
		each(item, fmt.Sprintf("%s[%d]", path, i))
	}
}

func (d *decoder) str(n *yaml.Node, path string) string {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" || n.Tag == "!!map" || n.Tag == "!!seq" {
		d.fail(n, path, "must be a string")
		return ""
	}
	return n.Value
}

func (d *decoder) boolean(n *yaml.Node, path string) bool {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		d.fail(n, path, "must be true or false")
		return false
	}
	b, _ := strconv.ParseBool(n.Value)
	return b
}

func (d *decoder) count(n *yaml.Node, path string) int64 {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		d.fail(n, path, "must be an integer")
		return 0
	}
	v, err := strconv.ParseInt(n.Value, 0, 64)
	if err != nil || v < 0 {
		d.fail(n, path, "%s is not an integer from 0 to %d", quote(n.Value), int64(math.MaxInt64))
		return 0
	}
	return v
}

func (d *decoder) topology(doc *yaml.Node) *Topology {
	t := &Topology{}
	root := doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	d.mapping(root, "", map[string]func(*yaml.Node, string){
		"planes": func(v *yaml.Node, p string) {
			d.sequence(v, p, func(item *yaml.Node, p string) {
				var pl Plane
				d.mapping(item, p, map[string]func(*yaml.Node, string){
					"name":        func(v *yaml.Node, p string) { pl.Name = d.str(v, p) },
					"description": func(v *yaml.Node, p string) { pl.Description = d.str(v, p) },
				})
				t.Planes = append(t.Planes, pl)
			})
		},
		"switches": func(v *yaml.Node, p string) {
			d.sequence(v, p, func(item *yaml.Node, p string) { t.Switches = append(t.Switches, d.switchItem(item, p)) })
		},
		"endpoints": func(v *yaml.Node, p string) {
			d.sequence(v, p, func(item *yaml.Node, p string) { t.Endpoints = append(t.Endpoints, d.endpoint(item, p)) })
		},
	})
	return t
}

func (d *decoder) switchItem(n *yaml.Node, path string) Switch {
	var s Switch
	d.mapping(n, path, map[string]func(*yaml.Node, string){
		"name":  func(v *yaml.Node, p string) { s.Name = d.str(v, p) },
		"plane": func(v *yaml.Node, p string) { s.Plane = d.str(v, p) },
		"gnmi": func(v *yaml.Node, p string) {
			d.mapping(v, p, map[string]func(*yaml.Node, string){
				"address":      func(v *yaml.Node, p string) { s.GNMI.Address = d.str(v, p) },
				"insecure":     func(v *yaml.Node, p string) { s.GNMI.Insecure = d.boolean(v, p) },
				"username":     func(v *yaml.Node, p string) { s.GNMI.Username = d.str(v, p) },
				"password_env": func(v *yaml.Node, p string) { s.GNMI.PasswordEnv = d.str(v, p) },
				"allow_plaintext_password": func(v *yaml.Node, p string) {
					s.GNMI.AllowPlaintextPassword = d.boolean(v, p)
				},
				"tls": func(v *yaml.Node, p string) {
					tls := &TLSConfig{}
					d.mapping(v, p, map[string]func(*yaml.Node, string){
						"ca":          func(v *yaml.Node, p string) { tls.CA = d.str(v, p) },
						"cert":        func(v *yaml.Node, p string) { tls.Cert = d.str(v, p) },
						"key":         func(v *yaml.Node, p string) { tls.Key = d.str(v, p) },
						"server_name": func(v *yaml.Node, p string) { tls.ServerName = d.str(v, p) },
					})
					s.GNMI.TLS = tls
				},
			})
		},
	})
	return s
}

func (d *decoder) endpoint(n *yaml.Node, path string) Endpoint {
	var e Endpoint
	d.mapping(n, path, map[string]func(*yaml.Node, string){
		"name":        func(v *yaml.Node, p string) { e.Name = d.str(v, p) },
		"description": func(v *yaml.Node, p string) { e.Description = d.str(v, p) },
		"ports": func(v *yaml.Node, p string) {
			d.sequence(v, p, func(item *yaml.Node, p string) { e.Ports = append(e.Ports, d.port(item, p)) })
		},
	})
	return e
}

func (d *decoder) port(n *yaml.Node, path string) Port {
	var pt Port
	d.mapping(n, path, map[string]func(*yaml.Node, string){
		"plane":     func(v *yaml.Node, p string) { pt.Plane = d.str(v, p) },
		"switch":    func(v *yaml.Node, p string) { pt.Switch = d.str(v, p) },
		"interface": func(v *yaml.Node, p string) { pt.Interface = d.str(v, p) },
		"speed_bps": func(v *yaml.Node, p string) { pt.SpeedBps = d.count(v, p) },
		"address": func(v *yaml.Node, p string) {
			s := d.str(v, p)
			if s == "" {
				return
			}
			a, err := netip.ParseAddr(s)
			if err != nil || a.Zone() != "" {
				d.fail(v, p, "%s is not an IP address", quote(s))
				return
			}
			pt.Address = a.Unmap()
		},
	})
	return pt
}
