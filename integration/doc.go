// Package integration holds tests that run the real binaries together:
// fabricd replicas sharing PostgreSQL and etcd, endpoint agents with the
// transport on an emulated fabric, and the failures between them. It has
// no code of its own.
package integration
