//go:build linux

package bench

import (
	"bufio"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// sysCounters are the network namespace's TCP retransmissions and the
// byte counters of the interfaces holding the bind addresses.
type sysCounters struct {
	retrans    int64
	retransOK  bool
	planeBytes []int64 // nil when the planes do not map to distinct interfaces
}

// readSysCounters reads Tcp RetransSegs from /proc/net/snmp (the
// namespace's TCP and MPTCP subflows, all of them) and, for each bind
// address, the tx (client) or rx (server) bytes of its interface from
// /sys/class/net. Per-plane bytes are left unknown when two planes share an
// interface (loopback) or an address has none.
func readSysCounters(cfg *Config) (sysCounters, bool) {
	var s sysCounters
	s.retrans, s.retransOK = tcpRetransSegs()
	ifaces := interfacesFor(cfg)
	if ifaces != nil {
		dir := "tx_bytes"
		if cfg.Role == RoleServer {
			dir = "rx_bytes"
		}
		for _, name := range ifaces {
			b, err := os.ReadFile("/sys/class/net/" + name + "/statistics/" + dir)
			if err != nil {
				s.planeBytes = nil
				break
			}
			v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			s.planeBytes = append(s.planeBytes, v)
		}
	}
	return s, true
}

func (s sysCounters) since(base sysCounters) Stats {
	var st Stats
	if s.retransOK && base.retransOK {
		r := s.retrans - base.retrans
		st.Retransmits = &r
	}
	if s.planeBytes != nil && len(s.planeBytes) == len(base.planeBytes) {
		for i := range s.planeBytes {
			st.PlaneBytes = append(st.PlaneBytes, s.planeBytes[i]-base.planeBytes[i])
		}
	}
	return st
}

func tcpRetransSegs() (int64, bool) {
	f, err := os.Open("/proc/net/snmp")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var names []string
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != "Tcp:" {
			continue
		}
		if names == nil {
			names = fields
			continue
		}
		for i, n := range names {
			if n == "RetransSegs" && i < len(fields) {
				v, err := strconv.ParseInt(fields[i], 10, 64)
				return v, err == nil
			}
		}
	}
	return 0, false
}

// interfacesFor maps each bind address to its interface; nil unless each
// plane has its own interface and none is loopback.
func interfacesFor(cfg *Config) []string {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	byAddr := map[string]net.Interface{}
	for _, i := range ifs {
		addrs, err := i.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				byAddr[ipn.IP.String()] = i
			}
		}
	}
	var names []string
	seen := map[string]bool{}
	for _, b := range cfg.Bind {
		i, ok := byAddr[b.String()]
		if !ok || i.Flags&net.FlagLoopback != 0 || seen[i.Name] {
			return nil
		}
		seen[i.Name] = true
		names = append(names, i.Name)
	}
	return names
}

// fdLimit is the process's file descriptor limit (RLIMIT_NOFILE, which
// Go raises to the hard limit at start), 0 when unknown.
func fdLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return rl.Cur
}
