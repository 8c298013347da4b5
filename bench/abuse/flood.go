package abuse

import (
	"context"
	"encoding/base64"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// FloodResult is phase 3: legitimate GETs quiet and during a bad-token flood.
type FloodResult struct {
	Quiet         TrafficStats `json:"quiet"`
	Flood         TrafficStats `json:"during_flood"`
	FloodRequests int          `json:"flood_requests"`
	FloodPerSec   float64      `json:"flood_req_per_sec"`
	FloodStatuses map[int]int  `json:"flood_statuses"`
}

// legitWarmUp is legitimate traffic sent, and not measured, before the
// quiet window.
const legitWarmUp = 3 * time.Second

// maxSamples bounds the latencies a legitimate client keeps.
const maxSamples = 1 << 20

// runLegit runs cfg.LegitClients clients, each GET /api/v1/planes with the
// admin token on its own connection, for d.
func runLegit(ctx context.Context, t *target, cfg Config, d time.Duration) TrafficStats {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	base := apiURL(t)
	var mu sync.Mutex
	var all []time.Duration
	failed := 0
	start := time.Now()
	var wg sync.WaitGroup
	for range cfg.LegitClients {
		wg.Go(func() {
			c := newClient(1, nil)
			defer c.CloseIdleConnections()
			var lat []time.Duration
			bad := 0
			for ctx.Err() == nil && len(lat) < maxSamples {
				t0 := time.Now()
				status, _, err := do(c, request(ctx, base, http.MethodGet, "/api/v1/planes", "", t.fd.Token()))
				switch {
				case ctx.Err() != nil: // cut off by the window's end
				case err != nil || status != http.StatusOK:
					bad++
				default:
					lat = append(lat, time.Since(t0))
				}
				if cfg.LegitPause > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(cfg.LegitPause):
					}
				}
			}
			mu.Lock()
			all, failed = append(all, lat...), failed+bad
			mu.Unlock()
		})
	}
	wg.Wait()
	return summarize(all, failed, time.Since(start))
}

// floodRoutes are what the flood asks for, each needing a valid token.
var floodRoutes = []string{"/api/v1/planes", "/api/v1/topology", "/api/v1/events", "/api/v1/drains"}

// runFlood measures legitimate traffic for cfg.Quiet, then again for
// cfg.Flood while cfg.FloodClients send well-formed random bearer tokens
// back to back from cfg.Sources loopback addresses.
func runFlood(ctx context.Context, t *target, cfg Config, logger *slog.Logger) (*FloodResult, error) {
	res := &FloodResult{}
	runLegit(ctx, t, cfg, legitWarmUp) // not counted: connections, caches, a fresh fabricd's start-up work
	res.Quiet = runLegit(ctx, t, cfg, cfg.Quiet)
	logger.Info("quiet legitimate traffic", "req_per_sec", res.Quiet.ReqPerSec, "p99", res.Quiet.P99.String())

	fctx, cancel := context.WithCancel(ctx)
	base := apiURL(t)
	var statuses statusCount
	var sent atomic.Int64
	var wg sync.WaitGroup
	for i := range cfg.FloodClients {
		wg.Go(func() {
			c := newClient(1, hostileSource(i, cfg.Sources))
			defer c.CloseIdleConnections()
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(100+i)))
			secret := make([]byte, 32)
			for fctx.Err() == nil {
				for j := range secret {
					secret[j] = byte(rng.Uint32())
				}
				token := "mpt_" + base64.RawURLEncoding.EncodeToString(secret)
				status, _, err := do(c, request(fctx, base, http.MethodGet, floodRoutes[rng.IntN(len(floodRoutes))], "", token))
				if fctx.Err() != nil {
					return
				}
				sent.Add(1)
				statuses.add(status)
				if err != nil { // refused or reset: do not spin
					select {
					case <-fctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
				}
			}
		})
	}
	start := time.Now()
	res.Flood = runLegit(ctx, t, cfg, cfg.Flood)
	res.FloodRequests = int(sent.Load())
	res.FloodPerSec = float64(res.FloodRequests) / time.Since(start).Seconds()
	cancel()
	wg.Wait()
	res.FloodStatuses = statuses.snapshot()
	logger.Info("legitimate traffic during the flood", "req_per_sec", res.Flood.ReqPerSec, "p99", res.Flood.P99.String(),
		"flood_req_per_sec", res.FloodPerSec)
	return res, nil
}
