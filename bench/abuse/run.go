package abuse

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// Phases are the benchmark's parts, in the order they run.
var Phases = []string{"growth", "metrics", "flood", "conns"}

// Result is everything measured; Rows is the report.
type Result struct {
	Config  Config         `json:"config"`
	Phases  []string       `json:"phases"`
	Start   time.Time      `json:"start"`
	Seconds float64        `json:"seconds"`
	Growth  *GrowthResult  `json:"growth,omitempty"`
	Metrics *MetricsResult `json:"metrics,omitempty"`
	Flood   *FloodResult   `json:"flood,omitempty"`
	Conns   *ConnResult    `json:"conns,omitempty"`
	Rows    []Row          `json:"rows"`
}

// ParsePhases checks a comma-separated list of phases ("all" is every one).
func ParsePhases(s string) ([]string, error) {
	if s == "all" || s == "" {
		return Phases, nil
	}
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(Phases, p) {
			return nil, fmt.Errorf("abuse: unknown phase %q (want %s or all)", p, strings.Join(Phases, ", "))
		}
		out = append(out, p)
	}
	return out, nil
}

// Run starts fabricd and runs the phases, in the order of Phases.
func Run(ctx context.Context, cfg Config, phases []string, logger *slog.Logger) (*Result, error) {
	res := &Result{Config: cfg, Start: time.Now()}
	t, err := startTarget(ctx, cfg)
	if err != nil {
		return nil, err
	}
	keep := cfg.Keep
	defer func() { t.close(keep) }()
	logger.Info("fabricd started", "pid", t.fd.Pid(), "api", t.fd.URL(), "data_dir", t.dataDir)
	for _, p := range Phases {
		if !slices.Contains(phases, p) {
			continue
		}
		logger.Info("phase", "name", p)
		switch p {
		case "growth":
			res.Growth, err = runGrowth(ctx, t, cfg, logger)
		case "metrics":
			res.Metrics, err = runMetrics(ctx, t, cfg, logger)
		case "flood":
			res.Flood, err = runFlood(ctx, t, cfg, logger)
		case "conns":
			res.Conns, err = runConns(ctx, t, cfg, logger)
		}
		if err == nil {
			err = ctx.Err()
		}
		select {
		case <-t.fd.Done():
			keep = true // for its log
			err = fmt.Errorf("fabricd exited (see %s): %v", t.fd.LogPath, err)
		default:
		}
		if err != nil {
			return nil, fmt.Errorf("abuse: phase %s: %w", p, err)
		}
		res.Phases = append(res.Phases, p)
	}
	res.Seconds = time.Since(res.Start).Seconds()
	res.Rows = res.rows()
	return res, nil
}
