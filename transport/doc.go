// Package transport is Multiplane's endpoint transport: a reliable,
// message-oriented, multipath transport over UDP for multi-plane Ethernet
// fabrics, after MetaRoCE.
//
// A Transport is bound to one local UDP address per plane. Dial connects to
// a peer given its per-plane addresses; Accept returns connections peers
// dialed. A Conn carries many messages at once over many paths: a path is
// (local plane port, remote plane port, entropy), the entropy being the UDP
// source port that steers ECMP inside the plane. Every packet says which
// message and offset it carries, so the receiver places data directly and
// delivers whole messages in any order, each exactly once.
//
//	t, err := transport.Listen(transport.Config{Local: addrs})
//	c, err := t.Dial(ctx, peerAddrs)
//	err = c.Send(ctx, msg)       // returns when the peer has all of msg
//	msg, err := c.Recv(ctx)      // on the other side
//
// Reliability, per path (Mode multipath, the default): per-path packet
// numbers, ACKs with a cumulative number and a 256-bit SACK bitmap, a gap
// (three later packets acknowledged, or 5/4 of an RTT) declares loss and
// the data is resent at once, preferably on another path, with a fresh
// packet number; per-path retransmission timeouts back off exponentially
// and never fall below the largest recent delay; spurious resends and
// timeouts are detected, counted and (for the window) undone; when every
// path times out at once the timers only back off (a stall, not a path
// failure). Never go-back-N. Mode gbn is a RoCEv2-like baseline in the same engine: one
// path, in-order receive, NAK and go-back-N.
//
// Congestion: each path has a delay-aware AIMD window (ECN marks and
// queueing delay are congestion; isolated losses are resent, not punished)
// and a pacer, shared by every connection to the same peer that uses the
// path, so what is in flight is bounded by what the paths carry however
// many connections there are. The delay it reacts to is the fabric's: sockets report
// each datagram's kernel receive time, the receiver says in every ACK how
// long it held the newest packet, and the sender removes that and the time
// the ACK waited for its own poll loop from the RTT sample, so scheduling
// stalls of a busy host do not read as congestion (Swift separates fabric
// and endpoint delay the same way, with NIC timestamps); the receiver grants each sender a share of its ingress
// budget in every ACK and the sender caps itself to it. Paths that lose
// packets or see ECN are used less for an RTT (mildly for an isolated
// loss); paths with repeated timeouts are retired and probed with
// duplicated data, so traffic leaves a failed plane within a few RTTs
// without control-plane help. The agent replaces the path set at
// runtime with SetPathSet, atomically.
//
// Flow control and failure: Send blocks (backpressure) while the
// connection's unacknowledged bytes exceed Config.SendBuffer, and the
// receiver's credit (Config.ReceiveWindow) bounds what it must buffer.
// Liveness is per peer: a peer heard on any of its connections, on any
// plane, is alive, so a connection starved by many siblings does not fail.
// When the peer has been silent for Config.PeerTimeout every one of its
// connections fails: every pending Send and Recv returns an error wrapping
// ErrPeerUnreachable, so no data is lost silently; a peer that sends data
// that cannot be placed ends the connection with ErrProtocol.
//
// I/O runs in per-plane poll loops with batched recvmmsg/sendmmsg (see
// Config.PollMode; adaptive spins only within a per-process budget and
// otherwise blocks); sends of equal-size datagrams to one address go out as
// one UDP GSO send where the kernel allows it. A poll loop that processes
// ACKs sends the data they let out itself, at the end of its batch (run to
// completion); new messages and timers are handled by the transport's
// scheduler (one goroutine per CPU, whatever the number of connections),
// which runs a connection only when woken or when its next deadline is due. Receivers acknowledge every
// 8 packets, on request, or within 500 µs (about 1 ms with Go's timers). Messages returned by Recv may be
// handed back with Recycle to avoid an allocation per message. Stats and
// Transport.Stats report per-connection, per-path and per-plane counters
// (bytes, packets, retransmits, spurious retransmits, losses, timeouts, ECN
// marks, RTT, kernel drops, garbage datagrams) for the bench and the agent.
package transport
