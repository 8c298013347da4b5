package userspace_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/multiplane/multiplane/fabricsim/userspace"
)

// Two hosts, two planes at 100 Mbit/s each. Host 0 sends on plane 1 to host
// 1, which listens on its plane-1 address and sees the datagram come from
// host 0's relay address on that plane.
func Example() {
	ctx := context.Background()
	// A port the kernel picks, free beside `make demo` (whose fabric has
	// the default, 4793).
	probe, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 78, 0, 1)})
	if err != nil {
		panic(err)
	}
	port := probe.LocalAddr().(*net.UDPAddr).Port
	probe.Close()
	f, err := userspace.Start(ctx, userspace.Config{
		Hosts: 2,
		Port:  port,
		Planes: []userspace.PlaneConfig{
			{RateBps: 100e6},
			{RateBps: 100e6, Loss: 0.0, ECNThresholdBytes: 30000},
		},
	})
	if err != nil {
		panic(err)
	}
	defer f.Close()

	// Host 1's transport listens on its plane-1 address and the fabric port.
	rx, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(f.ListenAddr(1, 1)))
	if err != nil {
		panic(err)
	}
	defer rx.Close()
	// Host 0 sends from its plane-1 address (any port) to host 1's peer address.
	tx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: f.LocalAddr(0, 1).AsSlice()})
	if err != nil {
		panic(err)
	}
	defer tx.Close()
	if _, err := tx.WriteToUDPAddrPort([]byte("hello"), f.PeerAddr(1, 1)); err != nil {
		panic(err)
	}

	buf := make([]byte, 1500)
	_ = rx.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, from, err := rx.ReadFromUDPAddrPort(buf)
	if err != nil {
		panic(err)
	}
	fmt.Printf("host 0 binds %v, host 1 listens on %v at the fabric port: %v\n", f.LocalAddr(0, 1), f.ListenAddr(1, 1).Addr(), f.ListenAddr(1, 1).Port() == uint16(port))
	fmt.Printf("%q from %v at the fabric port: %v (host 0 as seen on plane 1)\n", buf[:n], from.Addr(), from.Port() == uint16(port))
	fmt.Println("plane 1 port eth1 in-pkts:", f.Stats(1).Ports[0].Counters.InPkts)
	// Output:
	// host 0 binds 127.77.1.1, host 1 listens on 127.77.1.2 at the fabric port: true
	// "hello" from 127.78.1.1 at the fabric port: true (host 0 as seen on plane 1)
	// plane 1 port eth1 in-pkts: 1
}
