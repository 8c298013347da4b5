package store_test

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/multiplane/multiplane/store"
	"github.com/multiplane/multiplane/store/pgcluster"
)

// Example wires the store the way fabricd does: a private cluster when no
// database URL is given, migrations to head, metrics, and a readiness check.
func Example() {
	ctx := context.Background()
	logger := slog.Default()

	databaseURL := "" // --database-url
	if databaseURL == "" {
		cluster, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: "/var/lib/multiplane", Logger: logger})
		if err != nil {
			logger.Error("start postgres", "err", err)
			return
		}
		defer cluster.Stop(context.Background())
		databaseURL = cluster.URL()
	}

	db, err := store.Open(ctx, databaseURL, logger)
	if err != nil {
		logger.Error("open database", "err", err)
		return
	}
	defer db.Close()
	if err := db.Migrate(ctx); err != nil {
		logger.Error("migrate", "err", err)
		return
	}
	prometheus.MustRegister(db.Collector())

	if err := db.Ready(ctx); err != nil { // for /readyz
		logger.Warn("not ready", "err", err)
	}
	var generation int64
	_ = db.Pool().QueryRow(ctx, "SELECT generation FROM fabric_state").Scan(&generation)
}
