// Package api is fabricd's REST API (gin), under /api/v1, plus /healthz,
// /readyz and /metrics. Handlers are thin adapters over the domain packages
// (inventory, auth, audit, planes); errors map to statuses in one place
// (errors.go); every route is registered in routes.go and documented in
// openapi.yaml, which is served at /api/v1/openapi.yaml.
//
//	h := api.New(api.Deps{Inventory: inv, Tokens: tokens, Audit: auditLog, ...})
//	http.ListenAndServe("127.0.0.1:8080", h)
package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/multiplane/multiplane/audit"
	"github.com/multiplane/multiplane/auth"
	"github.com/multiplane/multiplane/enrollment"
	"github.com/multiplane/multiplane/events"
	"github.com/multiplane/multiplane/history"
	"github.com/multiplane/multiplane/intents"
	"github.com/multiplane/multiplane/inventory"
	"github.com/multiplane/multiplane/planes"
	"github.com/multiplane/multiplane/policy"
	"github.com/multiplane/multiplane/policy/fleet"
)

// DefaultMaxBodyBytes bounds request bodies (a topology of 4,000 endpoints
// with 8 ports each is about 3 MB of YAML).
const DefaultMaxBodyBytes = 8 << 20

// Deps are what the API serves from.
type Deps struct {
	Inventory *inventory.Inventory
	Tokens    *auth.Tokens
	Audit     *audit.Log
	Health    planes.Health               // live states; nil: everything healthy
	Ready     func(context.Context) error // readiness of the stores
	Events    *events.Store               // history
	Bus       *planes.Bus                 // live transitions for /stream
	Intents   *intents.Store              // drains, rate classes
	Fleet     *fleet.Reader               // agents' reports in etcd
	History   *history.Recorder           // recent series; nil: none
	// Enrollment issues endpoint credentials; nil: enrollment is off.
	Enrollment *enrollment.Service
	// Demo is the demo fabric's fault control; nil outside the demo.
	Demo DemoControl
	// PolicyInput gathers what policy is computed from (what-if, previews).
	PolicyInput  func(context.Context) (policy.Input, error)
	PolicyConfig policy.Config
	// OnIntents, if set, is called after drains or rate classes changed.
	OnIntents func(context.Context)
	// OnTopology, if set, is called after a PUT changed the topology.
	OnTopology func(*inventory.Snapshot)
	Logger     *slog.Logger
	// Registry serves /metrics; the API registers its HTTP metrics on it.
	Registry     *prometheus.Registry
	MaxBodyBytes int64
	// Limits bound connections, streams and failed authentications; zero
	// fields take DefaultLimits.
	Limits Limits
}

// Server is the HTTP handler of the API.
type Server struct {
	deps        Deps
	limits      Limits
	engine      *gin.Engine
	metrics     *httpMetrics
	streams     *slots // event streams
	requests    *slots // requests in progress, per token
	ready       func(context.Context) error
	authLimiter *authLimiter
	tarpit      *tarpit
	anon        *anonAudit
	stopping    chan struct{}
	stopOnce    sync.Once
}

// Shutdown ends long-lived responses (the event stream) so an HTTP server
// shutdown does not wait for them, and writes the pending summary of refused
// anonymous requests; HTTPServer registers it with
// http.Server.RegisterOnShutdown.
func (s *Server) Shutdown() {
	s.stopOnce.Do(func() { close(s.stopping) })
	s.FlushAudit()
}

// FlushAudit writes the pending summary of refused anonymous requests now
// instead of at the next interval.
func (s *Server) FlushAudit() { s.anon.flushNow() }

// New builds the API handler.
func New(d Deps) *Server {
	if d.Health == nil {
		d.Health = planes.NewEngine(planes.DefaultHealthConfig(), nil, nil, nil)
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	if d.MaxBodyBytes <= 0 {
		d.MaxBodyBytes = DefaultMaxBodyBytes
	}
	gin.SetMode(gin.ReleaseMode)
	l := d.Limits.withDefaults()
	s := &Server{deps: d, limits: l, engine: gin.New(), metrics: newHTTPMetrics(d.Registry), stopping: make(chan struct{}),
		streams: newSlots(l.MaxStreams, l.MaxStreamsPerTok), requests: newSlots(math.MaxInt, l.MaxRequestsPerTok), authLimiter: newAuthLimiter(l.FailedAuthRate, l.FailedAuthBurst), tarpit: newTarpit(l.FailedAuthDelay)}
	s.ready = s.readiness()
	s.anon = &anonAudit{pending: map[anonKey]*anonCount{}, every: l.AuditFlush, flush: s.recordAnonymous}
	s.engine.HandleMethodNotAllowed = true
	s.engine.ContextWithFallback = true
	// The client address is the connection's: X-Forwarded-For from anyone
	// would let a client choose its own address for rate limits and audit.
	if err := s.engine.SetTrustedProxies(nil); err != nil {
		panic(err) // nil is always accepted
	}
	s.routes()
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.engine.ServeHTTP(w, r) }

// Routes lists the registered routes as "METHOD /path" with gin's
// :param syntax.
func (s *Server) Routes() []gin.RouteInfo { return s.engine.Routes() }

const ctxLogger = "api.logger"

func loggerFrom(c *gin.Context) *slog.Logger {
	if l, ok := c.Get(ctxLogger); ok {
		return l.(*slog.Logger)
	}
	return slog.Default()
}

// recovery turns a panic into a logged 500 JSON error.
func (s *Server) recovery(c *gin.Context) {
	c.Set(ctxLogger, s.deps.Logger)
	defer func() {
		if r := recover(); r != nil {
			s.deps.Logger.Error("handler panic", "route", c.FullPath(), "panic", r)
			fail(c, &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error; see the fabricd log"})
		}
	}()
	c.Next()
}

// readBody reads the request body up to the configured limit. A body that
// is too slow or cut short is the client's error (408, 400), not fabricd's.
func (s *Server) readBody(c *gin.Context) ([]byte, error) {
	r := http.MaxBytesReader(c.Writer, c.Request.Body, s.deps.MaxBodyBytes)
	data, err := io.ReadAll(r)
	var maxBytes *http.MaxBytesError
	var netErr net.Error
	switch {
	case err == nil, errors.As(err, &maxBytes):
		return data, err
	case errors.As(err, &netErr) && netErr.Timeout():
		return nil, &Error{Status: http.StatusRequestTimeout, Code: "request_timeout",
			Message: "the request body did not arrive in time (--http-read-timeout " + s.limits.ReadTimeout.String() + ")"}
	}
	return nil, &Error{Status: http.StatusBadRequest, Code: "incomplete_body", Message: "the request body ended before its announced length"}
}

// readJSON reads the request body (readBody) and decodes it strictly into
// v (decodeJSON).
func (s *Server) readJSON(c *gin.Context, v any) error {
	body, err := s.readBody(c)
	if err != nil {
		return err
	}
	return decodeJSON(body, v)
}

func (s *Server) healthz(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) }

// NotReady names the component behind a readiness error; /readyz shows
// callers the names and keeps the errors (socket paths, addresses) for the
// log.
type NotReady struct {
	Component string
	Err       error
}

func (e *NotReady) Error() string { return e.Component + ": " + e.Err.Error() }
func (e *NotReady) Unwrap() error { return e.Err }

func (s *Server) readyz(c *gin.Context) {
	if err := s.ready(c.Request.Context()); err != nil {
		c.JSON(http.StatusServiceUnavailable, gin.H{"status": "not ready", "components": notReadyComponents(err)})
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ready"})
}

// notReadyComponents lists the components named in err (errors.Join and
// wrapping included), or "fabricd" when none is named.
func notReadyComponents(err error) map[string]string {
	out := map[string]string{}
	var walk func(error)
	walk = func(err error) {
		var nr *NotReady
		if errors.As(err, &nr) {
			out[nr.Component] = "unavailable"
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	if len(out) == 0 {
		out["fabricd"] = "unavailable"
	}
	return out
}
