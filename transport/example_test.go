package transport_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/multiplane/multiplane/transport"
)

// Two endpoints with two planes each on loopback: one dials, the other
// accepts, and a message crosses over both planes.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	any := netip.MustParseAddrPort("127.0.0.1:0")

	server, err := transport.Listen(transport.Config{Local: []netip.AddrPort{any, any}})
	if err != nil {
		panic(err)
	}
	defer server.Close()
	client, err := transport.Listen(transport.Config{Local: []netip.AddrPort{any, any}})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	go func() {
		c, err := server.Accept(ctx)
		if err != nil {
			return
		}
		msg, err := c.Recv(ctx)
		if err != nil {
			return
		}
		_ = c.Send(ctx, append([]byte("echo: "), msg...))
		<-c.Done() // wait for the client to close
	}()

	c, err := client.Dial(ctx, server.LocalAddrs())
	if err != nil {
		panic(err)
	}
	if err := c.Send(ctx, []byte("hello over two planes")); err != nil {
		panic(err)
	}
	reply, err := c.Recv(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(reply))
	fmt.Println("mode:", c.Mode())
	_ = c.Close()
	// Output:
	// echo: hello over two planes
	// mode: multipath
}

// Replacing the path set at runtime: plane 1 drained, plane 0 with four
// entropy paths (four UDP source ports).
func ExampleConn_SetPathSet() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	any := netip.MustParseAddrPort("127.0.0.1:0")
	server, _ := transport.Listen(transport.Config{Local: []netip.AddrPort{any, any}})
	defer server.Close()
	client, _ := transport.Listen(transport.Config{Local: []netip.AddrPort{any, any}})
	defer client.Close()
	go func() {
		c, err := server.Accept(ctx)
		if err != nil {
			return
		}
		for {
			if _, err := c.Recv(ctx); err != nil {
				return
			}
		}
	}()
	c, err := client.Dial(ctx, server.LocalAddrs())
	if err != nil {
		panic(err)
	}
	err = c.SetPathSet(transport.PathSet{Generation: 7, Planes: []transport.PlanePaths{
		{Plane: 0, Weight: 1, Entropy: 4},
		{Plane: 1, Weight: 0},
	}})
	if err != nil {
		panic(err)
	}
	if err := c.Send(ctx, make([]byte, 1<<20)); err != nil {
		panic(err)
	}
	st := c.Stats()
	fmt.Println("generation:", st.PathSetGeneration)
	fmt.Println("plane 1 packets:", st.Planes[1].PacketsSent)
	fmt.Println("plane 0 carried the message:", st.Planes[0].BytesSent >= 1<<20)
	_ = c.Close()
	// Output:
	// generation: 7
	// plane 1 packets: 0
	// plane 0 carried the message: true
}
