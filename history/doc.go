// Package history keeps fabricd's recent per-plane and per-link series in
// memory: a sample of the health engine every second, kept an hour, and
// averaged per minute (worst state) for a day, for the dashboard's charts
// and GET /api/v1/planes/{name}/series.
//
//	r := history.New(history.DefaultConfig(), engine)
//	r.SetTopology(topology, links) // and on every topology change
//	go r.Run(ctx)
//	cols, err := r.Plane("p1", time.Now().Add(-10*time.Minute), false)
package history
