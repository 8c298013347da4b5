package api

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/multiplane/multiplane/auth"
	"github.com/multiplane/multiplane/web"
)

// routes registers every route of the API; openapi.yaml documents each one
// (TestOpenAPIMatchesRoutes keeps the two in step).
func (s *Server) routes() {
	r := s.engine
	r.Use(s.recovery, s.measure)
	dashboard := web.Handler()
	r.NoRoute(func(c *gin.Context) {
		// Everything outside /api, /healthz, /readyz and /metrics is the dashboard.
		if c.Request.Method == http.MethodGet && !strings.HasPrefix(c.Request.URL.Path, "/api/") {
			dashboard.ServeHTTP(c.Writer, c.Request)
			return
		}
		fail(c, &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such route: " + c.Request.URL.Path})
	})
	r.NoMethod(func(c *gin.Context) {
		fail(c, &Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Message: c.Request.Method + " is not allowed here"})
	})

	r.GET("/healthz", s.healthz)
	r.GET("/readyz", s.readyz)
	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(s.deps.Registry, promhttp.HandlerOpts{Registry: s.deps.Registry})))
	r.GET("/api/v1/openapi.yaml", s.openAPI)

	v1 := r.Group("/api/v1", s.auditMutations, s.authenticate)
	viewer := v1.Group("", require(auth.RoleViewer))
	operator := v1.Group("", require(auth.RoleOperator))
	admin := v1.Group("", require(auth.RoleAdmin))

	viewer.GET("/topology", s.getTopology)
	admin.PUT("/topology", s.putTopology)

	viewer.GET("/planes", s.listPlanes)
	viewer.GET("/planes/:name", s.getPlane)
	viewer.GET("/switches", s.listSwitches)
	viewer.GET("/switches/:name", s.getSwitch)
	viewer.GET("/endpoints", s.listEndpoints)
	viewer.GET("/endpoints/:name", s.getEndpoint)
	viewer.GET("/links", s.listLinks)
	viewer.GET("/endpoints/:name/policy", s.endpointPolicy)
	viewer.GET("/endpoints/:name/status", s.endpointStatus)
	operator.PUT("/endpoints/:name/rate-class", s.assignRateClass)
	operator.DELETE("/endpoints/:name/rate-class", s.unassignRateClass)
	viewer.GET("/convergence", s.convergence)
	viewer.GET("/drains", s.listDrains)
	operator.POST("/drains", s.createDrain)
	operator.DELETE("/drains/:id", s.deleteDrain)
	viewer.GET("/rate-classes", s.listRateClasses)
	operator.PUT("/rate-classes/:name", s.putRateClass)
	operator.DELETE("/rate-classes/:name", s.deleteRateClass)
	viewer.GET("/events", s.listEvents)
	viewer.GET("/stream", s.stream)

	admin.GET("/tokens", s.listTokens)
	admin.POST("/tokens", s.createToken)
	admin.DELETE("/tokens/:id", s.revokeToken)
	admin.GET("/audit", s.listAudit)
}
