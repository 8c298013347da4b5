package testutil

import (
	"net"
	"net/netip"
	"slices"
	"testing"
)

func TestFreeUDPPortIsFreeOnEveryAddress(t *testing.T) {
	addrs := []netip.Addr{netip.MustParseAddr("127.78.0.1"), netip.MustParseAddr("127.77.3.2"), netip.MustParseAddr("127.0.0.1")}
	for range 20 {
		port := FreeUDPPort(t, addrs...)
		for _, a := range addrs {
			c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, uint16(port))))
			if err != nil {
				t.Fatalf("port %d not free on %v: %v", port, a, err)
			}
			c.Close()
		}
	}
}

// A port free on the first address but taken on a later one is refused.
func TestTryUDPPortRefusesAPortTakenOnAnotherAddress(t *testing.T) {
	held, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	taken := uint16(held.LocalAddr().(*net.UDPAddr).Port)
	addrs := []netip.Addr{netip.MustParseAddr("127.78.0.1"), netip.MustParseAddr("127.0.0.1")}
	if port, err := tryUDPPort(addrs, taken); err == nil {
		t.Fatalf("port %d accepted although it is taken on 127.0.0.1", port)
	}
	if port, err := tryUDPPort(addrs[:1], taken); err != nil || port != int(taken) {
		t.Fatalf("port %d on 127.78.0.1 alone: %d, %v", taken, port, err)
	}
}

func TestFabricAddrsAreRelaysAndTransports(t *testing.T) {
	got := fabricAddrs(2, 2)
	want := []string{"127.78.0.1", "127.77.0.1", "127.78.0.2", "127.77.0.2", "127.78.1.1", "127.77.1.1", "127.78.1.2", "127.77.1.2"}
	var s []string
	for _, a := range got {
		s = append(s, a.String())
	}
	if !slices.Equal(s, want) {
		t.Fatalf("fabricAddrs(2, 2) = %v, want %v", s, want)
	}
}
