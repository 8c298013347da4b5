// Package abuse is the abuse benchmark of fabricd (make bench-abuse): it
// starts the real fabricd binary (private PostgreSQL, embedded etcd, the
// example topology) in a temporary data directory on a free loopback port
// and measures what hostile clients cost it:
//
//  1. database and RSS growth under unauthenticated requests with large
//     paths, and the size of GET /api/v1/audit afterwards;
//  2. the size of /metrics before and after requests with random methods;
//  3. the p99 of legitimate GETs, quiet and during a bad-token flood;
//  4. how long slow-body and idle connections stay open.
//
// Every loop is bounded in count and time, and every phase can stop early on
// a safety cap (database growth, fabricd RSS) so a vulnerable fabricd does
// not fill the machine. Run measures; Result.Rows, WriteMarkdown and
// WriteJSON report, each figure with its target and PASS or FAIL:
//
//	cfg := abuse.DefaultConfig()
//	res, err := abuse.Run(ctx, cfg, abuse.Phases, logger)
//	abuse.WriteMarkdown(w, res, "bench-abuse")
package abuse
