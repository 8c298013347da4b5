// Package userspace emulates a multi-plane fabric inside one process, with no
// root: each plane is a relay (a few goroutines and one UDP socket per host)
// that forwards datagrams between the hosts' transport sockets on loopback,
// with per-port rate shaping, a drop-tail byte queue, random loss, reordering,
// fixed delay, ECN marking above a queue threshold, and up/down state.
//
// # Addressing
//
// Host h (0-based) on plane p binds its transport sockets to
// 127.77.<p>.<h+1> ([Fabric.LocalAddr]), with any source ports (several
// source ports give entropy; the relay does not look at them). The relay of
// plane p owns one socket per host at 127.78.<p>.<h+1>:Port
// ([Fabric.PeerAddr]); Port is [Config.Port], default 4793.
//
// A datagram from 127.77.p.A:any to 127.78.p.B:Port is forwarded from
// 127.78.p.A:Port to 127.77.p.B:Port. So B's transport listens on
// 127.77.p.B:Port and answers A at 127.78.p.A:Port, which the relay forwards to
// 127.77.p.A:Port. Datagrams from any other source are counted as
// unroutable and dropped. All of 127.0.0.0/8 routes to the loopback
// interface on Linux, so no set-up is needed.
//
// # Switch model
//
// Each (plane, host) pair is a switch port. A datagram entering at port A and
// leaving at port B is: dropped if the plane or either link is down; dropped
// with probability Loss (counted as in-errors on A, like a corrupted frame);
// queued at B's egress, which serializes at RateBps (0 = unlimited) with a
// drop-tail limit of QueueBytes (counted as out-discards on B); marked
// ECN CE if the backlog it joins exceeds ECNThresholdBytes and it carries ECT
// (the TOS byte is read with IP_RECVTOS and written back with an IP_TOS
// control message on every forwarded datagram); then held for Delay, plus
// ReorderDelay with probability Reorder (so later datagrams overtake it).
//
// Counters per port follow the OpenConfig interface counter names
// (in-pkts, out-octets, in-discards, ...) so emulated gNMI switches can serve
// them as they are; see [PortCounters].
//
// # Use
//
//	f, err := userspace.Start(ctx, userspace.Config{
//		Hosts:  2,
//		Planes: []userspace.PlaneConfig{{RateBps: 100e6}, {RateBps: 100e6}},
//	})
//	if err != nil { ... }
//	defer f.Close()
//	local := f.LocalAddr(0, 1) // bind host 0's plane-1 sockets here
//	peer := f.PeerAddr(1, 1)   // and send to host 1 on plane 1 here
//
// I/O is batched (recvmmsg/sendmmsg through golang.org/x/net/ipv4), and
// datagrams are handed between goroutines in queues, not one channel
// operation per packet.
package userspace
