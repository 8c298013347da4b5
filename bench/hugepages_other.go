//go:build !linux

package bench

func adviseHugePages([]byte) {}
