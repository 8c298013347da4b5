package abuse

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"
)

// MetricsResult is phase 2: /metrics before and after random methods.
type MetricsResult struct {
	Requests int         `json:"requests"`
	Statuses map[int]int `json:"statuses"`
	Before   int64       `json:"metrics_before_bytes"`
	After    int64       `json:"metrics_after_bytes"`
}

// methodRoutes are where the random methods go: a route of each kind.
var methodRoutes = []string{"/api/v1/planes", "/api/v1/drains/d1", "/api/v1/nope", "/healthz", "/metrics", "/", "/api/v1/openapi.yaml"}

// metricsMemo is a little more than how long fabricd serves one gathering
// of /metrics.
const metricsMemo = 1100 * time.Millisecond

// randomMethod is 3 to 12 random uppercase letters.
func randomMethod(rng *rand.Rand) string {
	return randomString(rng, "ABCDEFGHIJKLMNOPQRSTUVWXYZ", 3+rng.IntN(10))
}

// runMetrics measures /metrics, sends cfg.MethodRequests unauthenticated
// requests with random methods, and measures it again. Before the first
// measurement a fifth as many such requests go out, so the series a fixed
// label set brings (an "other" method, the 429 of a limited address) exist
// already: what grows after is what input creates. fabricd gathers
// /metrics at most once a second, so each measurement waits past that.
func runMetrics(ctx context.Context, t *target, cfg Config, logger *slog.Logger) (*MetricsResult, error) {
	ph := newPhase(ctx, t, cfg)
	defer ph.close()
	ctx, base, hostile, scraper := ph.ctx, ph.base, ph.hostile, ph.own
	rng := rand.New(rand.NewPCG(cfg.Seed, 2))
	warm := make([]string, max(2*len(methodRoutes), cfg.MethodRequests/5))
	for i := range warm {
		warm[i] = randomMethod(rng)
	}
	parallel(ctx, len(warm), cfg.Conns, func() bool { return false }, func(i int) {
		do(hostile.pick(i), request(ctx, base, warm[i], methodRoutes[i%len(methodRoutes)], "", ""))
	})
	size := func() (int64, error) {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(metricsMemo):
		}
		_, n, err := do(scraper, request(ctx, base, http.MethodGet, "/metrics", "", ""))
		return n, err
	}
	res := &MetricsResult{}
	if _, err := size(); err != nil { // its own series, counted after the first scrape
		return nil, err
	}
	var err error
	if res.Before, err = size(); err != nil {
		return nil, err
	}
	methods := make([]string, cfg.MethodRequests)
	for i := range methods {
		methods[i] = randomMethod(rng)
	}
	var statuses statusCount
	res.Requests = parallel(ctx, cfg.MethodRequests, cfg.Conns, func() bool { return false }, func(i int) {
		status, _, _ := do(hostile.pick(i), request(ctx, base, methods[i], methodRoutes[i%len(methodRoutes)], "", ""))
		statuses.add(status)
	})
	res.Statuses = statuses.snapshot()
	if res.After, err = size(); err != nil {
		return nil, err
	}
	logger.Info("random methods sent", "requests", res.Requests, "metrics_before", res.Before, "metrics_after", res.After)
	return res, nil
}
