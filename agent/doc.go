// Package agent is the endpoint agent: it watches the endpoint's document
// and the fabric generation in etcd, validates the document, applies its
// path set and rate policy to the transport atomically, persists the last
// known good document to disk, and reports its status under an etcd lease
// (docs/etcd-layout.md).
//
//	a, err := agent.New(cfg, agent.NewTransportApplier(t), logger)
//	err = a.Run(ctx) // until ctx is done
//
// Traffic never depends on etcd: the last known good document is applied
// at start before etcd answers, a document is applied only once the fabric
// generation key has caught up with it (so a partial update is never
// applied), and a bad document is rejected and reported while the last good
// one stays applied. Many agents can share one process and one etcd client
// (Config.Client), as the convergence benchmark does.
package agent
