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

// maxFieldErrors bounds how many problems one document reports; decoding
// stops once it is reached.
const maxFieldErrors = 50

// Bounds of the work of expanding aliases. A YAML alias is a pointer to an
// anchored node, so a document of a few kilobytes can name millions of
// nodes (an alias bomb: a list of 500 aliases of a list of 500 aliases);
// yaml.v3's own guard does not apply when decoding into a yaml.Node. The
// decoder counts every node it visits, through aliases or not, and refuses
// a document once that count passes max(minNodeBudget, nodeBudgetFactor ×
// the nodes the document itself holds): ordinary anchors, aliases and
// merge keys stay well inside it.
const (
	minNodeBudget    = 10_000
	nodeBudgetFactor = 4
)

// keyRE matches keys that may appear in a field path as they are.
var keyRE = regexp.MustCompile(`^[a-z_]{1,32}$`)

// ParseTopology decodes a YAML or JSON topology document strictly (unknown
// fields, wrong types and duplicate keys are errors) and validates it.
// Anchors, aliases and merge keys (<<) are allowed, but a document that
// expands through aliases to more than max(10,000, 4 × its own nodes) nodes
// is refused, and decoding stops after 50 errors.
func ParseTopology(data []byte) (*Topology, error) {
	t, _, err := parseTopology(data)
	return t, err
}

// parseTopology is ParseTopology, also returning how many nodes it walked.
func parseTopology(data []byte) (*Topology, int, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, 0, &ValidationError{Fields: []FieldError{{Field: "(document)", Message: syntaxMessage(err)}}}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, 0, &ValidationError{Fields: []FieldError{{Field: "(document)", Line: extra.Line, Message: "more than one YAML document"}}}
	}
	d := &decoder{lines: map[string]int{}, budget: max(minNodeBudget, nodeBudgetFactor*countNodes(&doc))}
	t := d.topology(&doc)
	if len(d.errs) == 0 {
		for _, fe := range validate(t) {
			fe.Line = d.lineOf(fe.Field)
			d.errs = append(d.errs, fe)
		}
	}
	if len(d.errs) > 0 {
		return nil, d.visited, &ValidationError{Fields: d.errs}
	}
	return t, d.visited, nil
}

func syntaxMessage(err error) string {
	if err.Error() == "EOF" {
		return "empty document"
	}
	// The parser quotes the document: bounded, so a long token cannot make
	// an error too large to store or show.
	return Shown("malformed document: "+err.Error(), maxSyntaxMessage)
}

const maxSyntaxMessage = 512

// countNodes returns the number of nodes of a tree, each once: an alias
// counts as one node, not as what it names.
func countNodes(n *yaml.Node) int {
	c := 1
	for _, sub := range n.Content {
		c += countNodes(sub)
	}
	return c
}

// decoder walks a YAML node tree, collecting errors with field paths and lines.
type decoder struct {
	errs  []FieldError
	lines map[string]int // field path → line, for validation errors
	// visited counts the nodes walked, aliases expanded; past budget the
	// document is refused and decoding stops.
	visited, budget int
	stopped         bool
}

// visit counts one node walked at path and reports whether decoding goes
// on: false once the budget or the error bound is reached.
func (d *decoder) visit(n *yaml.Node, path string) bool {
	if d.stopped {
		return false
	}
	d.visited++
	if d.visited > d.budget {
		if path == "" {
			path = "(document)"
		}
		d.fail(n, path, "the document expands to more than %d nodes through YAML aliases", d.budget)
		d.stopped = true
		return false
	}
	return true
}

func (d *decoder) fail(n *yaml.Node, field, format string, args ...any) {
	if len(d.errs) >= maxFieldErrors {
		return
	}
	defer func() {
		if len(d.errs) >= maxFieldErrors {
			d.stopped = true
		}
	}()
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

// mapping calls fields[key] for each key of a mapping node; unknown keys are
// errors. Merge keys (<<: *anchor, or a list of them) add the keys of the
// mappings they name that the mapping does not give itself.
func (d *decoder) mapping(n *yaml.Node, path string, fields map[string]func(v *yaml.Node, path string)) {
	n = resolve(n)
	if !d.visit(n, path) {
		return
	}
	d.lines[path] = n.Line
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "must be a mapping")
		return
	}
	seen := map[string]bool{}
	var merged [][2]*yaml.Node // key and value pairs from merge keys
	for i := 0; i+1 < len(n.Content) && !d.stopped; i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !d.visit(k, path) {
			return
		}
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merged = d.merge(v, path, merged)
			continue
		}
		key := d.key(k, fields)
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
	// Merged keys apply after the mapping's own, which they never
	// override; the first merged mapping that gives a key wins.
	for _, kv := range merged {
		if d.stopped {
			return
		}
		k, v := kv[0], kv[1]
		key := d.key(k, fields)
		if seen[key] {
			continue
		}
		seen[key] = true
		sub := key
		if path != "" {
			sub = path + "." + key
		}
		d.lines[sub] = k.Line
		f, ok := fields[key]
		if !ok {
			d.fail(k, sub, "unknown field")
			continue
		}
		f(v, sub)
	}
}

// key returns a mapping key as it goes into a field path.
func (d *decoder) key(k *yaml.Node, fields map[string]func(v *yaml.Node, path string)) string {
	key := k.Value
	if _, known := fields[key]; !known && !keyRE.MatchString(key) {
		// An unknown key goes into the error's field path: keep
		// that path storable and short whatever the key holds.
		key = quote(key)
	}
	return key
}

// merge appends the key and value pairs of the value of a merge key (a
// mapping, or a list of mappings) to pairs.
func (d *decoder) merge(v *yaml.Node, path string, pairs [][2]*yaml.Node) [][2]*yaml.Node {
	v = resolve(v)
	if !d.visit(v, path) {
		return pairs
	}
	maps := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		maps = nil
		for _, item := range v.Content {
			item = resolve(item)
			if !d.visit(item, path) {
				return pairs
			}
			maps = append(maps, item)
		}
	}
	for _, m := range maps {
		if m.Kind != yaml.MappingNode {
			d.fail(m, path, "a merge key (<<) must name a mapping or a list of mappings")
			return pairs
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			if !d.visit(m.Content[i], path) {
				return pairs
			}
			if m.Content[i].Tag == "!!merge" {
				d.fail(m.Content[i], path, "a merge key (<<) inside a merged mapping is not supported")
				return pairs
			}
			pairs = append(pairs, [2]*yaml.Node{m.Content[i], m.Content[i+1]})
		}
	}
	return pairs
}

func (d *decoder) sequence(n *yaml.Node, path string, each func(item *yaml.Node, path string)) {
	n = resolve(n)
	if !d.visit(n, path) || n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "must be a list")
		return
	}
	for i, item := range n.Content {
		if d.stopped {
			return
		}
		each(item, fmt.Sprintf("%s[%d]", path, i))
	}
}

func (d *decoder) str(n *yaml.Node, path string) string {
	n = resolve(n)
	if !d.visit(n, path) {
		return ""
	}
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" || n.Tag == "!!map" || n.Tag == "!!seq" {
		d.fail(n, path, "must be a string")
		return ""
	}
	return n.Value
}

func (d *decoder) boolean(n *yaml.Node, path string) bool {
	n = resolve(n)
	if !d.visit(n, path) {
		return false
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		d.fail(n, path, "must be true or false")
		return false
	}
	b, _ := strconv.ParseBool(n.Value)
	return b
}

func (d *decoder) count(n *yaml.Node, path string) int64 {
	n = resolve(n)
	if !d.visit(n, path) {
		return 0
	}
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
