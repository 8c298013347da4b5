// Package e2e runs whole-system benchmarks against the real fabricd binary
// (with its private PostgreSQL and embedded etcd): detection latency and
// telemetry ingest with a fleet of emulated gNMI switches, and convergence
// of thousands of endpoint agents after a plane fails. cmd/bench-e2e runs
// them (make bench-telemetry, make bench-convergence) and writes the
// results under docs/benchmarks/.
package e2e
