package testutil

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
)

// FreeUDPPort returns a UDP port free on every one of addrs at once: the
// kernel picks an ephemeral port on the first address and it is kept only
// if it also binds on all the others. Ephemeral ports never include the
// fixed ports `make demo` uses (its fabric's 4793, fabricd's 8080), so a
// test never collides with a running demo. The sockets are closed on
// return: bind the port at once.
func FreeUDPPort(t testing.TB, addrs ...netip.Addr) int {
	t.Helper()
	if len(addrs) == 0 {
		addrs = []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1})}
	}
	var lastErr error
	for range 100 {
		port, err := tryUDPPort(addrs, 0)
		if err == nil {
			return port
		}
		lastErr = err
	}
	t.Fatalf("no UDP port free on all of %v: %v", addrs, lastErr)
	return 0
}

// tryUDPPort binds port (0: one the kernel picks) on the first address
// and the same port on the others, and returns it if every bind worked.
func tryUDPPort(addrs []netip.Addr, port uint16) (int, error) {
	first, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrs[0], port)))
	if err != nil {
		return 0, err
	}
	defer first.Close()
	port = first.LocalAddr().(*net.UDPAddr).AddrPort().Port()
	for _, a := range addrs[1:] {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, port)))
		if err != nil {
			return 0, fmt.Errorf("port %d on %v: %w", port, a, err)
		}
		defer c.Close()
	}
	return int(port), nil
}

// FabricPort returns a port for userspace.Config.Port (and the demo's
// FabricPort) that is free on every address a userspace fabric of hosts
// and planes binds: the relays on 127.78.<p>.<h+1> and the hosts'
// transports on 127.77.<p>.<h+1> (fabricsim/userspace's addressing).
func FabricPort(t testing.TB, hosts, planes int) int {
	t.Helper()
	return FreeUDPPort(t, fabricAddrs(hosts, planes)...)
}

func fabricAddrs(hosts, planes int) []netip.Addr {
	var addrs []netip.Addr
	for p := range planes {
		for h := range hosts {
			addrs = append(addrs,
				netip.AddrFrom4([4]byte{127, 78, byte(p), byte(h + 1)}),
				netip.AddrFrom4([4]byte{127, 77, byte(p), byte(h + 1)}))
		}
	}
	return addrs
}
