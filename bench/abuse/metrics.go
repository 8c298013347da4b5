package abuse

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http"
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

// randomMethod is 3 to 12 random uppercase letters.
func randomMethod(rng *rand.Rand) string {
	return randomString(rng, "ABCDEFGHIJKLMNOPQRSTUVWXYZ", 3+rng.IntN(10))
}

// runMetrics measures /metrics, sends cfg.MethodRequests unauthenticated
// requests with random methods, and measures it again. Before the first
// measurement every route gets two random-method requests, so series a
// fixed label set brings (an "other" method, say) exist already.
func runMetrics(ctx context.Context, t *target, cfg Config, logger *slog.Logger) (*MetricsResult, error) {
	ph := newPhase(ctx, t, cfg)
	defer ph.close()
	ctx, base, hostile, scraper := ph.ctx, ph.base, ph.hostile, ph.own
	rng := rand.New(rand.NewPCG(cfg.Seed, 2))
	for i := range 2 * len(methodRoutes) {
		do(hostile.pick(i), request(ctx, base, randomMethod(rng), methodRoutes[i%len(methodRoutes)], "", ""))
	}
	size := func() (int64, error) {
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
