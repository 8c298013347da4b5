// Package chaos is the chaos suite (make chaos): the whole system on the
// userspace fabric with traffic (three fabricd replicas, a 3-member etcd,
// PostgreSQL, emulated gNMI switches, endpoint agents), while fabricd
// replicas, etcd members, PostgreSQL and switch streams are killed and
// restarted at random and planes fail. Invariants are checked throughout
// and at the end: no agent applies a partial generation, generations never
// go backwards, the history misses no transition, traffic keeps at least
// 70% of the healthy planes' capacity while 3 of 4 planes are up, and
// every replica converges to the same state. Its only code is its test,
// TestChaos; flags -chaos.duration, -chaos.seed and -chaos.report size it
// and write its report (docs/benchmarks/chaos.md).
package chaos
