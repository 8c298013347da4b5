package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/multiplane/multiplane/audit"
	"github.com/multiplane/multiplane/contract"
)

// Bounds of what one audit row keeps of a request.
const (
	auditPathBytes   = 256
	auditTargetBytes = 128
	auditMethodBytes = 16
)

// auditText makes s storable and bounded: invalid UTF-8 and control
// characters become U+FFFD, and it is cut to max bytes on a rune boundary.
func auditText(s string, max int) string {
	cut := len(s) > max
	if cut {
		s = s[:max] // a rune split here becomes U+FFFD below
	}
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '\uFFFD'
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if cut {
		s += "…"
	}
	return s
}

// knownMethod returns m if it is a standard HTTP method, else "other", so
// metric labels and summaries stay bounded by the code.
func knownMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

func mutating(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// actionNames name the mutating routes in the audit log.
var actionNames = map[string]string{
	"POST " + contract.PathEnroll:                "endpoint.enroll",
	"POST " + contract.PathRenew:                 "endpoint.renew",
	"PUT /api/v1/topology":                       "topology.replace",
	"DELETE /api/v1/endpoints/:name/credentials": "endpoint.revoke_credentials",
	"POST /api/v1/enrollment-tokens":             "enrollment_token.create",
	"PUT /api/v1/endpoints/:name/rate-class":     "rate_class.assign",
	"DELETE /api/v1/endpoints/:name/rate-class":  "rate_class.unassign",
	"POST /api/v1/drains":                        "drain.create",
	"DELETE /api/v1/drains/:id":                  "drain.end",
	"PUT /api/v1/rate-classes/:name":             "rate_class.put",
	"DELETE /api/v1/rate-classes/:name":          "rate_class.delete",
	"POST /api/v1/tokens":                        "token.create",
	"DELETE /api/v1/tokens/:id":                  "token.revoke",
	"POST /api/v1/demo/fail":                     "demo.fail",
	"POST /api/v1/demo/restore":                  "demo.restore",
}

// action names a request by its route (actionNames), never by what the
// client put in the path; a drain's dry run is drain.dry_run.
func action(c *gin.Context) string {
	if c.FullPath() == "" {
		return knownMethod(c.Request.Method) + " (unmatched)"
	}
	name := AuditAction(knownMethod(c.Request.Method), c.FullPath())
	if dry, _ := strconv.ParseBool(c.Query("dry_run")); name == "drain.create" && dry {
		return "drain.dry_run"
	}
	return name
}

// AuditAction is the audit log's name of a route ("drain.create"), or
// "METHOD /route" for one without a name.
func AuditAction(method, route string) string {
	if name, ok := actionNames[method+" "+route]; ok {
		return name
	}
	return method + " " + route
}

// auditMutations records every mutating request after it ran. Requests of
// an authenticated principal get a row each, bounded in size; refused
// anonymous ones are counted per client address, route and status and
// summarised at intervals, so they cost no storage per request.
func (s *Server) auditMutations(c *gin.Context) {
	c.Next()
	if !mutating(c.Request.Method) {
		return
	}
	p, ok := principal(c)
	if !ok {
		s.anon.count(anonKey{client: c.ClientIP(), action: action(c), status: c.Writer.Status()})
		return
	}
	e := audit.Entry{
		Actor: p.Name, Role: string(p.Role), Method: auditText(c.Request.Method, auditMethodBytes),
		Path: auditText(c.Request.URL.Path, auditPathBytes), Action: action(c), Status: c.Writer.Status(),
		Result: "ok", RemoteAddr: c.ClientIP(),
	}
	var targets []string
	for _, p := range c.Params {
		targets = append(targets, p.Key+"="+auditText(p.Value, auditTargetBytes))
	}
	if t, ok := c.Get(ctxAuditTarget); ok { // what the body named
		targets = append(targets, auditText(t.(string), auditTargetBytes))
	}
	e.Target = strings.Join(targets, ",")
	if code, ok := c.Get(ctxErrorCode); ok {
		e.Result = code.(string)
	}
	if d, ok := c.Get(ctxAuditDetail); ok {
		e.Detail, _ = json.Marshal(d)
	}
	s.record(c.Request.Context(), e)
}

func (s *Server) record(ctx context.Context, e audit.Entry) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.deps.Audit.Record(ctx, e); err != nil {
		s.deps.Logger.Error("audit record failed", "action", e.Action, "actor", e.Actor, "err", err)
		s.metrics.auditFailures.Inc()
	}
}

type anonKey struct {
	client, action string
	status         int
}

type anonCount struct {
	n           int64
	first, last time.Time
}

// anonAudit counts refused anonymous requests between flushes. It keeps at
// most maxAnonKeys keys; the rest are counted under client "other".
type anonAudit struct {
	mu      sync.Mutex
	pending map[anonKey]*anonCount
	timer   *time.Timer
	every   time.Duration
	flush   func(map[anonKey]*anonCount)
}

const maxAnonKeys = 64

func (a *anonAudit) count(k anonKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.pending[k]; !ok && len(a.pending) >= maxAnonKeys {
		k.client = "other"
	}
	now := time.Now()
	ac := a.pending[k]
	if ac == nil {
		ac = &anonCount{first: now}
		a.pending[k] = ac
	}
	ac.n++
	ac.last = now
	if a.timer == nil {
		a.timer = time.AfterFunc(a.every, a.flushNow)
	}
}

// flushNow writes what is pending.
func (a *anonAudit) flushNow() {
	a.mu.Lock()
	pending := a.pending
	a.pending = map[anonKey]*anonCount{}
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	a.mu.Unlock()
	if len(pending) > 0 {
		a.flush(pending)
	}
}

// recordAnonymous writes one summary row per client, route and status.
func (s *Server) recordAnonymous(pending map[anonKey]*anonCount) {
	for k, ac := range pending {
		e := audit.Entry{
			Actor: "anonymous", Method: strings.SplitN(k.action, " ", 2)[0], Path: "", Action: k.action,
			Status: k.status, Result: "refused_unauthenticated", RemoteAddr: k.client,
		}
		if code := statusCode(k.status); code != "" {
			e.Result = code
		}
		e.Detail, _ = json.Marshal(gin.H{"requests": ac.n, "first": ac.first.UTC(), "last": ac.last.UTC()})
		s.record(context.Background(), e)
	}
}

// statusCode names the refusal an anonymous request got.
func statusCode(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "unauthenticated"
	case http.StatusTooManyRequests:
		return "too_many_requests"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusMethodNotAllowed:
		return "method_not_allowed"
	}
	return ""
}
