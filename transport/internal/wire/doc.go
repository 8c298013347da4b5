// Package wire encodes and decodes the transport's UDP datagrams.
//
// Every datagram is one packet. Each packet type lives in its own file with
// a Parse… function, an Append method that appends the encoded packet
// (including the CRC) to a buffer, and a Length method that returns the
// exact encoded size. Parse functions never allocate: payloads and bitmaps
// are returned as views into the datagram or as fixed-size arrays. Any
// datagram that is too short, has the wrong version, an unknown type,
// inconsistent lengths or a bad CRC is rejected with an error wrapping
// ErrInvalid, so callers count it and drop it.
//
// # Wire format, version 5
//
// All integers are big-endian. Every packet starts with a 2-byte prefix and
// ends with a CRC32C (Castagnoli) of every byte before it:
//
//	offset size field
//	0      1    version (4) << 4 | type
//	1      1    flags (per type; DATA also carries its entropy index here)
//	...         type-specific fields
//	len-4  4    CRC32C over bytes [0, len-4)
//
// Types: 1 DATA, 2 ACK, 3 INIT, 4 INIT_ACK, 5 CLOSE. Versions 1 to 3 are
// not spoken any more (version 3's INIT had no instance; version 2's DATA
// carried 32-bit sequence numbers, message ids and byte offsets: 26 bytes
// of overhead): their datagrams are dropped as invalid.
//
// DATA (19-byte header + payload + 4-byte CRC: 23 bytes of overhead, so a
// 1472-byte datagram carries 1449 payload bytes, an 8972-byte one 8949):
//
//	0   1  0x51 (version 5, type 1)
//	1   1  flags (0x80 retransmission; 0x40 ack immediately, a hint
//	       receivers may ignore) | entropy index (low 6 bits, 0..63)
//	2   4  destination connection id
//	6   3  per-path sequence number (packet number), low 24 bits
//	9   3  message id, low 24 bits
//	12  3  chunk index: the payload's offset in the message / chunk size
//	15  4  total message length
//	19  n  payload: the rest of the datagram before the CRC
//	19+n 4 CRC32C
//
// A path is (plane, entropy index): the receiver knows the plane from the
// socket the datagram arrived on (planes are separate networks), so only
// the entropy index travels. ACK blocks name the path as plane<<8 | entropy.
// The receiver places the payload at chunk index × chunk size in the
// message's buffer as soon as it arrives, in any order; the message is
// complete when total length bytes have arrived. Both ends cut messages
// into chunks of the same size, min(both max datagram sizes) - 23 bytes,
// and every chunk but a message's last is full (the receiver checks it);
// message ids count up from 0 per connection and direction (an empty
// message is one DATA with length 0).
//
// Sequence numbers and message ids are 32-bit counters of which DATA
// carries the low 24 bits; the receiver takes the value nearest to the one
// it expects next (Expand24: the path's largest received + 1, the
// connection's oldest incomplete message). A sender keeps a path's packets
// in flight and its open messages (MaxMessagesInFlight) well inside 2^23 of
// those, so the nearest value is the sent one. ACKs carry full 32-bit
// numbers.
//
// ACK (24-byte header, then path blocks, then CRC):
//
//	0   1  0x52 (version 5, type 2)
//	1   1  flags (0x10 NAK: go-back-N receiver saw a gap; others 0)
//	2   2  number of path blocks
//	4   4  destination connection id
//	8   8  max data: cumulative count of new data bytes the receiver accepts
//	16  8  rate grant: bytes/s the sending endpoint may send to the receiver, all of its connections together (0 = no cap)
//	24  …  path blocks, each:
//	       0  2  path id (plane << 8 | entropy index)
//	       2  1  SACK words w (0..8, 64-bit words: up to 512 bits)
//	       3  1  reserved (0)
//	       4  4  cumulative: every packet number below it was received
//	       8  4  largest packet number received on the path (≥ cumulative-1)
//	       12 4  ECN echo: count of CE-marked packets received on the path
//	       16 4  ack delay in nanoseconds: how long the receiver held the
//	             largest packet, from its kernel receive time, before
//	             sending this block (saturates at 2^32-1)
//	       20 8w SACK bitmap: bit i (word i/64, bit i%64 from the LSB) set
//	             means packet number largest-1-i was received (receivers
//	             send 4 words: 256 bits). Anchoring the window at the newest
//	             packet keeps it moving past holes whose data was resent on
//	             another path with a new packet number.
//	len-4 4 CRC32C
//
// An ACK with no blocks is a keepalive. The sender takes an RTT sample
// from a block whose largest packet is newly acknowledged: the time from
// sending it to the kernel's receipt of the ACK, less the block's ack
// delay, is the fabric's round trip without either endpoint's scheduling
// delays; congestion control reacts to that (see package congestion).
//
// A datagram may carry several ACK packets back to back, each with its own
// header and CRC (AckLength finds the next), and nothing else after them:
// a receiver of many connections from one peer acks them in one datagram.
// It packs no more than the connection's agreed datagram size.
//
// INIT / INIT_ACK (32 bytes + CRC). The dialer sends an INIT on every plane
// from its receive socket there; the acceptor takes the dialer's address on
// a plane from the source of the INIT that crossed it, and answers each with
// an INIT_ACK on the same plane:
//
//	0   1  0x43 (INIT) or 0x44 (INIT_ACK)
//	1   1  reserved (0)
//	2   1  mode (1 multipath, 2 gbn)
//	3   1  plane index the packet is sent on
//	4   1  number of planes of the sender
//	5   1  reserved (0)
//	6   2  max datagram size the sender receives (and sends); each end
//	       sends DATA, ACK and CLOSE of at most the smaller of the two
//	8   4  destination connection id (0 in INIT)
//	12  4  source connection id (the sender's id for this connection)
//	16  8  max data: initial flow-control credit in bytes
//	24  8  instance: random per transport, so the acceptor tells apart
//	       dialers on different hosts that picked the same connection id
//	32  4  CRC32C
//
// CLOSE (10-byte header, reason, CRC):
//
//	0   1  0x55 (version 5, type 5)
//	1   1  reserved (0)
//	2   2  error code (0 = normal close)
//	4   4  destination connection id
//	8   2  reason length r
//	10  r  reason (UTF-8)
//	len-4 4 CRC32C
//
// # Exchange
//
// The dialer picks a random non-zero connection id and sends INIT on every
// plane every 25 ms until an INIT_ACK arrives (then, more slowly, on the
// planes that have not answered). Each side sends DATA on any path to the
// other's address on that path's plane; the receiver answers with an ACK
// for the paths it heard from, at the end of each receive batch, on the
// plane the batch arrived on. In go-back-N mode the receiver accepts only
// the next packet number of the single path, sends blocks without a
// bitmap, and sets NAK on the first out-of-order arrival. An ACK without
// blocks is sent at a quarter of the peer timeout when nothing else is
// sent, and when reading frees flow-control credit. CLOSE is sent twice on
// every plane and not acknowledged; a peer that misses it times out.
package wire
