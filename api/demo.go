package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/gin-gonic/gin"

	"github.com/multiplane/multiplane/demo/democtl"
	"github.com/multiplane/multiplane/planes"
)

// DemoControl fails and restores the demo fabric's planes and ports
// (democtl.Client); only fabricd run by bin/demo has one.
type DemoControl interface {
	State(context.Context) (democtl.State, error)
	Apply(context.Context, democtl.Change) (democtl.State, error)
}

// demoRequest names a plane, or one endpoint's port on it.
type demoRequest struct {
	Plane    string `json:"plane"`
	Endpoint string `json:"endpoint,omitempty"`
}

var errNotDemo = &Error{Status: http.StatusNotFound, Code: "not_demo",
	Message: "fabricd runs without --demo-control: there is no demo fabric to fail or restore"}

func (s *Server) getDemo(c *gin.Context) {
	if s.deps.Demo == nil {
		fail(c, errNotDemo)
		return
	}
	st, err := s.deps.Demo.State(c.Request.Context())
	if err != nil {
		fail(c, demoError(err))
		return
	}
	c.JSON(http.StatusOK, st)
}

func (s *Server) demoFail(c *gin.Context)    { s.demoChange(c, democtl.Fail) }
func (s *Server) demoRestore(c *gin.Context) { s.demoChange(c, democtl.Restore) }

// demoChange checks the plane and endpoint against the topology, then has
// the demo fabric fail or restore them.
func (s *Server) demoChange(c *gin.Context, action string) {
	if s.deps.Demo == nil {
		fail(c, errNotDemo)
		return
	}
	var req demoRequest
	if err := s.readJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	snap, ok := s.snapshot(c)
	if !ok {
		return
	}
	if err := checkDemoTarget(snap.Topology, req); err != nil {
		fail(c, err)
		return
	}
	target := "plane=" + req.Plane
	if req.Endpoint != "" {
		target = "port=" + req.Endpoint + "/" + req.Plane
	}
	c.Set(ctxAuditTarget, target)
	st, err := s.deps.Demo.Apply(c.Request.Context(), democtl.Change{Action: action, Plane: req.Plane, Endpoint: req.Endpoint})
	if err != nil {
		fail(c, demoError(err))
		return
	}
	c.JSON(http.StatusOK, st)
}

// checkDemoTarget refuses a plane the topology lacks, or an endpoint
// without a port on it.
func checkDemoTarget(t *planes.Topology, req demoRequest) error {
	if req.Plane == "" {
		return badRequest("invalid_field", "plane", "plane is required")
	}
	if !slices.ContainsFunc(t.Planes, func(p planes.Plane) bool { return p.Name == req.Plane }) {
		return badRequest("invalid_field", "plane", "the topology has no plane %q", req.Plane)
	}
	if req.Endpoint == "" {
		return nil
	}
	i := slices.IndexFunc(t.Endpoints, func(e planes.Endpoint) bool { return e.Name == req.Endpoint })
	if i < 0 {
		return badRequest("invalid_field", "endpoint", "the topology has no endpoint %q", req.Endpoint)
	}
	if !slices.ContainsFunc(t.Endpoints[i].Ports, func(p planes.Port) bool { return p.Plane == req.Plane }) {
		return badRequest("invalid_field", "endpoint", "endpoint %q has no port on plane %q", req.Endpoint, req.Plane)
	}
	return nil
}

// demoError maps the control's refusals to API errors; anything else
// means the demo control is gone.
func demoError(err error) error {
	var ce *democtl.Error
	if errors.As(err, &ce) {
		switch ce.Status {
		case http.StatusBadRequest:
			return badRequest("invalid_field", "", "%s", ce.Message)
		case http.StatusNotFound:
			return &Error{Status: http.StatusNotFound, Code: "not_found", Message: ce.Message}
		}
	}
	return &Error{Status: http.StatusBadGateway, Code: "demo_control_unavailable", Message: fmt.Sprintf("the demo control did not answer: %v", err)}
}
