package api

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	yaml "go.yaml.in/yaml/v3"

	"github.com/multiplane/multiplane/auth"
	"github.com/multiplane/multiplane/internal/page"
	"github.com/multiplane/multiplane/inventory"
	"github.com/multiplane/multiplane/planes"
	"github.com/multiplane/multiplane/policy/fleet"
)

// listResponse is the shape of every paginated list.
type listResponse[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
}

func (s *Server) snapshot(c *gin.Context) (*inventory.Snapshot, bool) {
	snap, err := s.deps.Inventory.Current(c.Request.Context())
	if err != nil {
		fail(c, err)
		return nil, false
	}
	return snap, true
}

// list filters items, sorts them by key and writes one page.
func list[T any](c *gin.Context, items []T, key func(T) string, keep func(T) bool) {
	req, err := page.Parse(c.Query("limit"), c.Query("cursor"))
	if err != nil {
		fail(c, err)
		return
	}
	var kept []T
	for _, it := range items {
		if keep(it) {
			kept = append(kept, it)
		}
	}
	slices.SortFunc(kept, func(a, b T) int { return strings.Compare(key(a), key(b)) })
	out, next := page.Slice(kept, key, req)
	if out == nil {
		out = []T{}
	}
	c.JSON(http.StatusOK, listResponse[T]{Items: out, NextCursor: next})
}

// stateFilter validates the state= query parameter.
func stateFilter(c *gin.Context, valid func(string) bool, allowed string) (string, bool) {
	st := c.Query("state")
	if st != "" && !valid(st) {
		fail(c, badRequest("invalid_parameter", "state", "state must be one of %s", allowed))
		return "", false
	}
	return st, true
}

func (s *Server) getTopology(c *gin.Context) {
	snap, ok := s.snapshot(c)
	if !ok {
		return
	}
	if snap.Revision == 0 {
		fail(c, fmt.Errorf("%w: no topology has been loaded yet (PUT /api/v1/topology or fabricd --topology)", planes.ErrNotFound))
		return
	}
	c.Header("ETag", fmt.Sprintf(`"%d"`, snap.Revision))
	c.Header("X-Topology-Revision", fmt.Sprint(snap.Revision))
	topo := snap.Topology
	if !seesCredentials(c) {
		topo = redactCredentials(topo)
	}
	if strings.Contains(c.GetHeader("Accept"), "yaml") {
		data, err := toYAML(topo)
		if err != nil {
			fail(c, err)
			return
		}
		c.Data(http.StatusOK, "application/yaml", data)
		return
	}
	c.JSON(http.StatusOK, topo)
}

// redacted stands for a credential detail only admins see.
const redacted = "(redacted)"

// seesCredentials: only admins see how fabricd logs in to switches.
func seesCredentials(c *gin.Context) bool {
	p, _ := principal(c)
	return p.Role.Allows(auth.RoleAdmin)
}

// redactCredentials returns a copy of t without gNMI usernames, credential
// variable names and key paths, for roles below admin.
func redactCredentials(t *planes.Topology) *planes.Topology {
	out := *t
	out.Switches = slices.Clone(t.Switches)
	for i := range out.Switches {
		out.Switches[i] = redactSwitch(out.Switches[i])
	}
	return &out
}

// redactSwitch is sw without its credential details; every view of a
// switch below admin goes through it.
func redactSwitch(sw planes.Switch) planes.Switch {
	g := &sw.GNMI
	if g.Username != "" {
		g.Username = redacted
	}
	if g.PasswordEnv != "" {
		g.PasswordEnv = redacted
	}
	if g.TLS != nil {
		tls := *g.TLS
		if tls.Key != "" {
			tls.Key = redacted
		}
		if tls.Cert != "" {
			tls.Cert = redacted
		}
		g.TLS = &tls
	}
	return sw
}

// switchView is a switch with its health, as the caller's role may see it.
func (s *Server) switchView(c *gin.Context, sw planes.Switch) planes.SwitchStatus {
	if !seesCredentials(c) {
		sw = redactSwitch(sw)
	}
	return planes.SwitchStatusOf(sw, s.deps.Health)
}

func (s *Server) putTopology(c *gin.Context) {
	body, err := s.readBody(c)
	if err != nil {
		fail(c, err)
		return
	}
	if ct := c.GetHeader("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || !(strings.Contains(mt, "yaml") || mt == "application/json" || mt == "text/plain") {
			fail(c, &Error{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
				Message: "send the topology as application/yaml or application/json"})
			return
		}
	}
	topo, err := planes.ParseTopology(body)
	if err != nil {
		fail(c, err)
		return
	}
	p, _ := principal(c)
	rev, changed, err := s.deps.Inventory.Replace(c.Request.Context(), topo, p.Name)
	if err != nil {
		fail(c, err)
		return
	}
	if changed && s.deps.OnTopology != nil {
		if snap, err := s.deps.Inventory.Current(c.Request.Context()); err == nil {
			s.deps.OnTopology(snap)
		}
	}
	resp := gin.H{"revision": rev, "changed": changed, "planes": len(topo.Planes), "switches": len(topo.Switches),
		"endpoints": len(topo.Endpoints), "links": len(topo.Links())}
	c.Set(ctxAuditDetail, resp)
	c.JSON(http.StatusOK, resp)
}

func (s *Server) listPlanes(c *gin.Context) {
	snap, ok := s.snapshot(c)
	if !ok {
		return
	}
	st, ok := stateFilter(c, planes.ValidPlaneState, "healthy, degraded, down, draining")
	if !ok {
		return
	}
	sums := snap.Topology.PlaneSummaries(snap.Links, s.deps.Health)
	list(c, sums, func(p planes.PlaneSummary) string { return p.Name },
		func(p planes.PlaneSummary) bool { return st == "" || string(p.State) == st })
}

func (s *Server) getPlane(c *gin.Context) {
	if snap, ok := s.snapshot(c); ok {
		getByName(c, "plane", snap.Topology.PlaneSummaries(snap.Links, s.deps.Health),
			func(p planes.PlaneSummary) string { return p.Name }, func(p planes.PlaneSummary) any { return p })
	}
}

// getByName writes the item named by the :name parameter, or a 404.
func getByName[T any](c *gin.Context, kind string, items []T, name func(T) string, view func(T) any) {
	for _, it := range items {
		if name(it) == c.Param("name") {
			c.JSON(http.StatusOK, view(it))
			return
		}
	}
	fail(c, fmt.Errorf("%w: %s %q", planes.ErrNotFound, kind, c.Param("name")))
}

func (s *Server) listSwitches(c *gin.Context) {
	snap, ok := s.snapshot(c)
	if !ok {
		return
	}
	st, ok := stateFilter(c, planes.ValidPlaneState, "healthy, degraded, down")
	if !ok {
		return
	}
	sws := make([]planes.SwitchStatus, len(snap.Topology.Switches))
	for i, sw := range snap.Topology.Switches {
		sws[i] = s.switchView(c, sw)
	}
	plane := c.Query("plane")
	list(c, sws, func(s planes.SwitchStatus) string { return s.Name },
		func(s planes.SwitchStatus) bool {
			return (plane == "" || s.Plane == plane) && (st == "" || string(s.State) == st)
		})
}

func (s *Server) getSwitch(c *gin.Context) {
	if snap, ok := s.snapshot(c); ok {
		getByName(c, "switch", snap.Topology.Switches, func(sw planes.Switch) string { return sw.Name },
			func(sw planes.Switch) any { return s.switchView(c, sw) })
	}
}

// endpointView is an endpoint with its agent, in the list.
type endpointView struct {
	planes.Endpoint
	// Agent is nil when the agents' statuses could not be read (etcd away).
	Agent *fleet.Agent `json:"agent"`
}

func (s *Server) listEndpoints(c *gin.Context) {
	snap, ok := s.snapshot(c)
	if !ok {
		return
	}
	plane := c.Query("plane")
	views := make([]endpointView, len(snap.Topology.Endpoints))
	names := make([]string, len(views))
	for i, e := range snap.Topology.Endpoints {
		views[i].Endpoint, names[i] = e, e.Name
	}
	if s.deps.Fleet != nil {
		ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
		agents, err := s.deps.Fleet.Agents(ctx, names)
		cancel()
		if err != nil {
			loggerFrom(c).Warn("endpoints listed without their agents", "err", err)
		}
		for i := range views {
			if a, ok := agents[views[i].Name]; ok {
				views[i].Agent = &a
			}
		}
	}
	list(c, views, func(e endpointView) string { return e.Name },
		func(e endpointView) bool {
			return plane == "" || slices.ContainsFunc(e.Ports, func(p planes.Port) bool { return p.Plane == plane })
		})
}

func (s *Server) getEndpoint(c *gin.Context) {
	if snap, ok := s.snapshot(c); ok {
		getByName(c, "endpoint", snap.Topology.Endpoints, func(e planes.Endpoint) string { return e.Name },
			func(e planes.Endpoint) any { return e })
	}
}

func (s *Server) listLinks(c *gin.Context) {
	snap, ok := s.snapshot(c)
	if !ok {
		return
	}
	st, ok := stateFilter(c, planes.ValidLinkState, "up, degraded, down")
	if !ok {
		return
	}
	links := make([]planes.LinkStatus, len(snap.Links))
	for i, l := range snap.Links {
		links[i] = planes.LinkStatusOf(l, s.deps.Health)
	}
	plane, sw, ep := c.Query("plane"), c.Query("switch"), c.Query("endpoint")
	list(c, links, func(l planes.LinkStatus) string { return l.Name }, func(l planes.LinkStatus) bool {
		return (plane == "" || l.Plane == plane) && (sw == "" || l.Switch == sw) &&
			(ep == "" || l.Endpoint == ep) && (st == "" || string(l.State) == st)
	})
}

// toYAML renders v as block-style YAML with its JSON field names, in order.
func toYAML(v any) ([]byte, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var n yaml.Node
	if err := yaml.Unmarshal(js, &n); err != nil {
		return nil, err
	}
	var unstyle func(*yaml.Node)
	unstyle = func(n *yaml.Node) {
		if n.Kind != yaml.ScalarNode {
			n.Style = 0
		}
		for _, c := range n.Content {
			unstyle(c)
		}
	}
	unstyle(&n)
	return yaml.Marshal(&n)
}
