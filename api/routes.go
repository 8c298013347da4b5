package api

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/multiplane/multiplane/auth"
	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/web"
)

// routes registers every route of the API; openapi.yaml documents each one
// (TestOpenAPIMatchesRoutes keeps the two in step). Each route names the
// query parameters it takes: any other is a 400, and every path and query
// value is checked as text before a handler sees it. Every GET answers HEAD.
func (s *Server) routes() {
	r := s.engine
	r.Use(s.measure, s.auditMutations, s.recovery) // a recovered panic is measured and audited as its 500
	dashboard := web.Handler()
	r.NoRoute(func(c *gin.Context) {
		// Everything outside /api, /healthz, /readyz and /metrics is the dashboard.
		if (c.Request.Method == http.MethodGet || c.Request.Method == http.MethodHead) && !strings.HasPrefix(c.Request.URL.Path, "/api/") {
			dashboard.ServeHTTP(c.Writer, c.Request)
			return
		}
		if strings.HasPrefix(c.Request.URL.Path, "/api/") {
			// Who probes for routes is audited by name; anonymous callers
			// learn nothing of which routes exist.
			if s.authenticate(c); c.IsAborted() {
				return
			}
		}
		fail(c, &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such route: " + quoteBounded(c.Request.URL.Path)})
	})
	r.NoMethod(func(c *gin.Context) {
		fail(c, &Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Message: quoteBounded(c.Request.Method) + " is not allowed here"})
	})
	handle := func(g gin.IRoutes, method, path string, query []string, h gin.HandlerFunc) {
		g.Handle(method, path, allowQuery(query...), h)
		if method == http.MethodGet {
			g.Handle(http.MethodHead, path, allowQuery(query...), h)
		}
	}
	get := func(g gin.IRoutes, path string, query []string, h gin.HandlerFunc) {
		handle(g, http.MethodGet, path, query, h)
	}
	paged := func(more ...string) []string { return append([]string{"limit", "cursor"}, more...) }

	get(r, "/healthz", nil, s.healthz)
	get(r, "/readyz", nil, s.readyz)
	get(r, "/metrics", nil, s.metricsHandler())
	get(r, "/api/v1/openapi.yaml", nil, s.openAPI)
	// Endpoints enroll with a bootstrap token, renew with their
	// certificate: neither is an API token.
	handle(r, "POST", contract.PathEnroll, nil, s.enroll)
	handle(r, "POST", contract.PathRenew, nil, s.renew)

	v1 := r.Group("/api/v1", s.authenticate)
	viewer := v1.Group("", require(auth.RoleViewer))
	operator := v1.Group("", require(auth.RoleOperator))
	admin := v1.Group("", require(auth.RoleAdmin))

	get(viewer, "/whoami", nil, s.whoami)
	get(viewer, "/topology", nil, s.getTopology)
	handle(admin, "PUT", "/topology", nil, s.putTopology)

	get(viewer, "/planes", paged("state"), s.listPlanes)
	get(viewer, "/planes/:name", nil, s.getPlane)
	get(viewer, "/planes/:name/series", []string{"since", "step"}, s.planeSeries)
	get(viewer, "/switches", paged("state", "plane"), s.listSwitches)
	get(viewer, "/switches/:name", nil, s.getSwitch)
	get(viewer, "/endpoints", paged("plane"), s.listEndpoints)
	get(viewer, "/endpoints/:name", nil, s.getEndpoint)
	get(viewer, "/links", paged("state", "plane", "switch", "endpoint"), s.listLinks)
	get(viewer, "/links/:name", nil, s.getLink)
	get(viewer, "/links/:name/series", []string{"since", "step"}, s.linkSeries)
	get(viewer, "/endpoints/:name/policy", nil, s.endpointPolicy)
	get(viewer, "/endpoints/:name/status", nil, s.endpointStatus)
	handle(operator, "DELETE", "/endpoints/:name/credentials", nil, s.revokeCredentials)
	handle(operator, "POST", "/enrollment-tokens", nil, s.createEnrollmentToken)
	get(operator, "/enrollment-tokens", []string{"limit"}, s.listEnrollmentTokens)
	handle(operator, "PUT", "/endpoints/:name/rate-class", nil, s.assignRateClass)
	handle(operator, "DELETE", "/endpoints/:name/rate-class", nil, s.unassignRateClass)
	get(viewer, "/convergence", nil, s.convergence)
	get(viewer, "/drains", paged("all"), s.listDrains)
	handle(operator, "POST", "/drains", []string{"dry_run", "force"}, s.createDrain)
	handle(operator, "DELETE", "/drains/:id", nil, s.deleteDrain)
	get(viewer, "/rate-classes", paged(), s.listRateClasses)
	handle(operator, "PUT", "/rate-classes/:name", nil, s.putRateClass)
	handle(operator, "DELETE", "/rate-classes/:name", nil, s.deleteRateClass)
	get(viewer, "/events", paged("subject", "subject_kind", "since", "until", "plane", "order"), s.listEvents)
	get(viewer, "/stream", []string{"last_event_id"}, s.stream)

	get(viewer, "/demo", nil, s.getDemo)
	handle(operator, "POST", "/demo/fail", nil, s.demoFail)
	handle(operator, "POST", "/demo/restore", nil, s.demoRestore)

	get(admin, "/tokens", paged(), s.listTokens)
	handle(admin, "POST", "/tokens", nil, s.createToken)
	handle(admin, "DELETE", "/tokens/:id", nil, s.revokeToken)
	get(admin, "/audit", paged(), s.listAudit)
}
