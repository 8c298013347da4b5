// Package netns builds an emulated multi-plane fabric out of Linux network
// namespaces, for benchmarks and tests that need the kernel's own stacks
// (TCP, MPTCP) or real links. It needs root, iproute2, tc (tbf), nftables
// and ethtool.
//
// # Layout
//
// For a fabric named N (Config.Name, default "mpfab-<pid>") with H hosts
// and P planes:
//
//   - host namespace N-h<h> for each host, with one veth p<p> per plane,
//     addressed 10.77.<p>.<h+1>/24 (Addr); each plane is its own subnet, so
//     a datagram to 10.77.p.x leaves by plane p and nothing else;
//   - switch namespace N-s<p> for each plane, with a Linux bridge br0 and
//     the peer veth h<h> of every host attached to it;
//   - on the switch port towards each host a tbf qdisc shapes to the plane's
//     rate (so queueing and drops happen in the switch, not in the sender's
//     socket), with a burst and a byte limit (BurstBytes, QueueBytes);
//   - random loss in the switch namespace: nftables table "bridge multiplane",
//     chain "loss" on the forward hook, "numgen random mod 1000000 < N drop"
//     (both directions, data and acknowledgements alike);
//   - TSO, GSO and GRO off on every veth and bridge, so a drop is one packet;
//   - the given MTU on every veth and bridge; IPv6 off.
//
// Everything lives inside the fabric's namespaces, created by Start and
// deleted by Close; nothing in the caller's namespace is touched.
// CleanupStale deletes namespaces left behind by a process that died.
//
// Programs run in a host with Command/Exec ("ip netns exec"), and Go code
// can open sockets in a host with Do.
package netns
