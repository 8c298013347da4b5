// Package bench is the engine of `endpoint bench`, a perftest-style
// (ib_send_bw) throughput benchmark: a server and a client move verified
// messages over one of several transports (modes) and report goodput.
//
// Modes sit behind one small interface, [Transport]: "multipath" and "gbn"
// are package transport's multipath mode and its go-back-N baseline; "mptcp"
// is Linux kernel MPTCP through net.Dialer/ListenConfig.SetMultipathTCP, its
// subflows configured outside the program (ip mptcp endpoint/limits);
// "tcp" is single-path TCP on the first plane.
//
// Every message carries a header (magic, kind, session, sequence number,
// connection index, length) and a CRC32C over header and payload; the
// server verifies each one, rejects duplicates and counts what it received.
// A run ends with one end message from the client (what each connection
// sent) and one result from the server (what it verified of each), on one
// live connection, not one of each per connection. So goodput is what the
// server verified, divided by the client's time from first send to that
// result; a corrupt, duplicate or missing message is an error (non-zero
// exit).
//
// The server serves any number of client runs at once (each is a session)
// and reports each client and the aggregate, with Jain's fairness index
// across connections and across clients. It reports what it verified to
// each client every 100 ms on the run's connection 0, so the client's
// progress lines count verified bytes, never bytes merely handed to Send.
// A failed connection ends alone: the others finish, and both sides count
// it (failed_connections).
//
// With --lat the client runs ping-pong round trips per message size
// instead (kindPing, echoed as kindPong) and reports perftest's latency
// columns ([LatencyStats]); the poll mode (--poll) is the transport's.
//
// Output follows perftest: progress lines on stderr every second, then a
// table (#bytes #iterations BW peak BW average MsgRate[Mpps]) plus
// retransmits and bytes per plane; with --json one JSON object ([Result]) is
// the last line of stdout.
package bench
