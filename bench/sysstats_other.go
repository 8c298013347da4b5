//go:build !linux

package bench

type sysCounters struct{}

func readSysCounters(*Config) (sysCounters, bool) { return sysCounters{}, false }

func (sysCounters) since(sysCounters) Stats { return Stats{} }
