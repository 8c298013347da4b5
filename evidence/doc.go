// Package evidence turns what the endpoint agents report of their peers
// (the per-plane reachability in their status documents in etcd) into
// evidence of each link for the health engine, which judges the links of
// a switch whose telemetry is unreachable by it (docs/health.md,
// "Endpoint evidence").
//
//	w := evidence.New(etcdClient, engine, logger)
//	w.SetTopology(topology.Links()) // and on every topology change
//	go w.Run(ctx)
package evidence
