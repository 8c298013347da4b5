package api

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/multiplane/multiplane/auth"
)

type httpMetrics struct {
	requests      *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	refusedConns  prometheus.Counter
	authLimited   prometheus.Counter
	streamRefused prometheus.Counter
	auditFailures prometheus.Counter
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
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "multiplane", Subsystem: "api", Name: name, Help: help})
	}
	m.refusedConns = counter("connections_refused_total", "Connections closed at accept because --http-max-connections were open.")
	m.authLimited = counter("auth_rate_limited_total", "Requests refused (429) because their client address failed authentication too often.")
	m.streamRefused = counter("streams_refused_total", "Event stream requests refused (429) by the stream limits.")
	m.auditFailures = counter("audit_failures_total", "Audit entries that could not be written.")
	reg.MustRegister(m.requests, m.duration, m.refusedConns, m.authLimited, m.streamRefused, m.auditFailures)
	return m
}

// measure counts requests per route pattern; methods outside the standard
// set count as "other", so no label value comes from the client.
func (s *Server) measure(c *gin.Context) {
	start := time.Now()
	c.Next()
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	method := knownMethod(c.Request.Method)
	s.metrics.requests.WithLabelValues(method, route, strconv.Itoa(c.Writer.Status())).Inc()
	s.metrics.duration.WithLabelValues(method, route).Observe(time.Since(start).Seconds())
}

const (
	ctxPrincipal   = "api.principal"
	ctxAuditDetail = "api.audit_detail"
	ctxAuditTarget = "api.audit_target" // the target a body names (a drain's)
)

func principal(c *gin.Context) (auth.Principal, bool) {
	p, ok := c.Get(ctxPrincipal)
	if !ok {
		return auth.Principal{}, false
	}
	return p.(auth.Principal), true
}

// authenticate requires a valid bearer token on every /api/v1 route but
// the OpenAPI document. A token that authenticated within auth.CacheTTL
// needs no look-up; for any other, see lookUp.
func (s *Server) authenticate(c *gin.Context) {
	secret, _ := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	secret = strings.TrimSpace(secret)
	p, ok := s.deps.Tokens.Cached(secret)
	if !ok {
		var err error
		if p, err = s.lookUp(c, secret); err != nil {
			fail(c, err)
			return
		}
	}
	c.Set(ctxPrincipal, p)
	// A token's requests in progress are bounded, so one client that never
	// reads its responses cannot hold unbounded memory.
	if s.requests.acquire(p.TokenID) != slotTaken {
		c.Header("Retry-After", "1")
		fail(c, &Error{Status: http.StatusTooManyRequests, Code: "too_many_requests",
			Message: "this token has " + strconv.Itoa(s.limits.MaxRequestsPerTok) + " requests in progress, the most one token may have"})
		return
	}
	defer s.requests.release(p.TokenID)
	c.Next()
}

// lookUp authenticates secret against the store, within the failed-
// authentication budget of the client's address: an address over it gets
// 429 without a look-up, held back first (see tarpit), so a flood of bad
// tokens costs fabricd a sleeping goroutine per connection, not a CPU.
func (s *Server) lookUp(c *gin.Context, secret string) (auth.Principal, error) {
	client := c.ClientIP()
	if err := s.reserveAuth(c, client); err != nil {
		return auth.Principal{}, err
	}
	if secret == "" {
		return auth.Principal{}, auth.ErrUnauthenticated // the reservation is spent
	}
	p, err := s.deps.Tokens.Authenticate(c.Request.Context(), secret)
	if !errors.Is(err, auth.ErrUnauthenticated) {
		s.authLimiter.refund(client) // a good token, or the store failed
	}
	return p, err
}

// reserveAuth spends one of client's failed-authentication budget (refund
// it on success); over the budget it holds the request back (see tarpit)
// and returns the 429.
func (s *Server) reserveAuth(c *gin.Context, client string) error {
	if ok, wait := s.authLimiter.reserve(client); !ok {
		s.metrics.authLimited.Inc()
		s.tarpit.hold(c.Request.Context())
		c.Header("Retry-After", strconv.Itoa(max(1, int(wait.Seconds()+0.999))))
		return &Error{Status: http.StatusTooManyRequests, Code: "too_many_requests",
			Message: "too many failed authentications from this address; retry later"}
	}
	return nil
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
