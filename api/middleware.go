package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/multiplane/multiplane/audit"
	"github.com/multiplane/multiplane/auth"
)

type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "multiplane", Subsystem: "api", Name: "http_requests_total",
			Help: "HTTP requests by method, route and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "multiplane", Subsystem: "api", Name: "http_request_duration_seconds",
			Help: "HTTP request latency by method and route.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"method", "route"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// measure counts requests per route pattern (bounded cardinality).
func (s *Server) measure(c *gin.Context) {
	start := time.Now()
	c.Next()
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	s.metrics.requests.WithLabelValues(c.Request.Method, route, strconv.Itoa(c.Writer.Status())).Inc()
	s.metrics.duration.WithLabelValues(c.Request.Method, route).Observe(time.Since(start).Seconds())
}

const (
	ctxPrincipal   = "api.principal"
	ctxAuditDetail = "api.audit_detail"
)

func principal(c *gin.Context) (auth.Principal, bool) {
	p, ok := c.Get(ctxPrincipal)
	if !ok {
		return auth.Principal{}, false
	}
	return p.(auth.Principal), true
}

// authenticate requires a valid bearer token on every /api/v1 route but
// the OpenAPI document.
func (s *Server) authenticate(c *gin.Context) {
	h := c.GetHeader("Authorization")
	secret, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || secret == "" {
		fail(c, auth.ErrUnauthenticated)
		return
	}
	p, err := s.deps.Tokens.Authenticate(c.Request.Context(), strings.TrimSpace(secret))
	if err != nil {
		fail(c, err)
		return
	}
	c.Set(ctxPrincipal, p)
	c.Next()
}

// require admits roles at least need.
func require(need auth.Role) gin.HandlerFunc {
	return func(c *gin.Context) {
		p, _ := principal(c)
		if !p.Role.Allows(need) {
			fail(c, &Error{Status: http.StatusForbidden, Code: "forbidden",
				Message: "this needs the " + string(need) + " role; the token has " + string(p.Role)})
			return
		}
		c.Next()
	}
}

// auditMutations records every mutating request, allowed or not, after it ran.
func (s *Server) auditMutations(c *gin.Context) {
	c.Next()
	switch c.Request.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return
	}
	e := audit.Entry{
		Actor: "anonymous", Role: "", Method: c.Request.Method, Path: c.Request.URL.Path,
		Action: c.Request.Method + " " + c.FullPath(), Status: c.Writer.Status(), Result: "ok",
		RemoteAddr: c.ClientIP(),
	}
	if c.FullPath() == "" {
		e.Action = c.Request.Method + " (unmatched)"
	}
	if p, ok := principal(c); ok {
		e.Actor, e.Role = p.Name, string(p.Role)
	}
	var targets []string
	for _, p := range c.Params {
		targets = append(targets, p.Key+"="+p.Value)
	}
	e.Target = strings.Join(targets, ",")
	if code, ok := c.Get(ctxErrorCode); ok {
		e.Result = code.(string)
	}
	if d, ok := c.Get(ctxAuditDetail); ok {
		e.Detail, _ = json.Marshal(d)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request.Context()), 5*time.Second)
	defer cancel()
	if err := s.deps.Audit.Record(ctx, e); err != nil {
		s.deps.Logger.Error("audit record failed", "action", e.Action, "actor", e.Actor, "err", err)
	}
}
