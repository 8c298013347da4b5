package abuse

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// GrowthResult is phase 1: unauthenticated requests with large paths.
type GrowthResult struct {
	Requests     int         `json:"requests"` // sent
	Statuses     map[int]int `json:"statuses"` // responses by status (0: transport error)
	Stopped      string      `json:"stopped,omitempty"`
	Seconds      float64     `json:"seconds"`
	DBBefore     int64       `json:"db_before_bytes"`
	DBAfter      int64       `json:"db_after_bytes"`
	AuditBefore  int64       `json:"audit_before_bytes"` // -1: no audit_log table
	AuditAfter   int64       `json:"audit_after_bytes"`
	RSSBefore    int64       `json:"rss_before_bytes"`
	RSSPeak      int64       `json:"rss_peak_bytes"` // during the requests and just after
	AuditStatus  int         `json:"audit_get_status"`
	AuditBytes   int64       `json:"audit_get_bytes"`
	AuditSeconds float64     `json:"audit_get_seconds"`
	RSSAudit     int64       `json:"rss_after_audit_bytes"` // peak during and just after the GET
}

// largeRoute is one shape of hostile request: the large segment goes where
// the route takes a parameter, or nowhere a route expects it.
type largeRoute struct {
	method string
	path   func(big string) (path, query string)
}

var largeRoutes = []largeRoute{
	{http.MethodDelete, func(b string) (string, string) { return "/api/v1/drains/" + b, "" }},
	{http.MethodPut, func(b string) (string, string) { return "/api/v1/rate-classes/" + b, "" }},
	{http.MethodDelete, func(b string) (string, string) { return "/api/v1/endpoints/" + b + "/rate-class", "" }},
	{http.MethodPost, func(b string) (string, string) { return "/api/v1/" + b, "" }},
	{http.MethodPatch, func(b string) (string, string) { return "/api/v1/planes/" + b, "" }},
	{http.MethodGet, func(b string) (string, string) { return "/api/v1/planes/" + b, "" }},
	{http.MethodDelete, func(b string) (string, string) { return "/" + b, "" }},
	{http.MethodPost, func(b string) (string, string) { return "/api/v1/drains", "reason=" + b }},
}

// randomSegment is n random letters and digits: unlike a run of one
// letter, PostgreSQL cannot compress it away.
func randomSegment(seed uint64, n int) string {
	return randomString(rand.New(rand.NewPCG(seed, 1)), "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", n)
}

// runGrowth sends cfg.LargeRequests unauthenticated requests with a
// cfg.PathBytes segment over cfg.Conns connections, watching the database
// and fabricd's RSS, then reads the audit log with the admin token.
func runGrowth(ctx context.Context, t *target, cfg Config, logger *slog.Logger) (*GrowthResult, error) {
	ph := newPhase(ctx, t, cfg)
	defer ph.close()
	ctx, base, hostile, admin := ph.ctx, ph.base, ph.hostile, ph.own
	// Warm up every route with a short segment, so first-use allocations are not counted.
	for i, r := range largeRoutes {
		p, q := r.path("warmup")
		do(hostile.pick(i), request(ctx, base, r.method, p, q, ""))
	}
	res := &GrowthResult{}
	var err error
	if res.DBBefore, res.AuditBefore, err = t.sizes(ctx); err != nil {
		return nil, err
	}
	res.RSSBefore = t.rss()
	res.RSSPeak = res.RSSBefore

	var stopped atomic.Pointer[string]
	stop := func(reason string) { stopped.CompareAndSwap(nil, &reason) }
	done := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() { // the only user of t.db while requests run
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			rss := t.rss()
			res.RSSPeak = max(res.RSSPeak, rss)
			if rss > cfg.MaxRSS {
				stop(fmt.Sprintf("fabricd's RSS passed the %s safety cap", mib(cfg.MaxRSS)))
			}
			if n%2 != 1 {
				continue
			}
			if db, _, err := t.sizes(ctx); err == nil && db-res.DBBefore > cfg.MaxDBGrowth {
				stop(fmt.Sprintf("the database grew past the %s safety cap", mib(cfg.MaxDBGrowth)))
			}
		}
	})

	big := randomSegment(cfg.Seed, cfg.PathBytes)
	var statuses statusCount
	start := time.Now()
	res.Requests = parallel(ctx, cfg.LargeRequests, cfg.Conns, func() bool { return stopped.Load() != nil }, func(i int) {
		r := largeRoutes[i%len(largeRoutes)]
		p, q := r.path(big)
		status, _, _ := do(hostile.pick(i), request(ctx, base, r.method, p, q, ""))
		statuses.add(status)
	})
	res.Seconds = time.Since(start).Seconds()
	close(done)
	watch.Wait()
	if ctx.Err() != nil {
		stop("the phase timeout (" + cfg.PhaseTimeout.String() + ") passed")
	}
	if s := stopped.Load(); s != nil {
		res.Stopped = *s
	}
	res.Statuses = statuses.snapshot()
	res.RSSPeak = max(res.RSSPeak, t.rss())
	if res.DBAfter, res.AuditAfter, err = t.sizes(context.WithoutCancel(ctx)); err != nil {
		return nil, err
	}
	logger.Info("large requests sent", "requests", res.Requests, "seconds", res.Seconds, "stopped", res.Stopped,
		"db_growth", res.DBAfter-res.DBBefore, "rss_peak", res.RSSPeak)

	// The audit log as an admin reads it: its size and what it costs fabricd.
	actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.PhaseTimeout)
	defer acancel()
	res.RSSAudit = t.rss()
	var peak sync.WaitGroup
	auditDone := make(chan struct{})
	peak.Go(func() {
		for {
			select {
			case <-auditDone:
				return
			case <-time.After(100 * time.Millisecond):
				res.RSSAudit = max(res.RSSAudit, t.rss())
			}
		}
	})
	start = time.Now()
	res.AuditStatus, res.AuditBytes, err = do(admin, request(actx, base, http.MethodGet, "/api/v1/audit", "limit="+strconv.Itoa(cfg.AuditLimit), t.fd.Token()))
	res.AuditSeconds = time.Since(start).Seconds()
	close(auditDone)
	peak.Wait()
	res.RSSAudit = max(res.RSSAudit, t.rss())
	if err != nil {
		logger.Warn("audit read failed", "err", err)
	}
	return res, nil
}
