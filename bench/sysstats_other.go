//go:build !linux

package bench

type sysCounters struct{}

func readSysCounters(*Config) (sysCounters, bool) { return sysCounters{}, false }

func (sysCounters) since(sysCounters) Stats { return Stats{} }

// fdLimit is the process's file descriptor limit, 0 when unknown.
func fdLimit() uint64 { return 0 }
