package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// kindCounter counts the messages of each kind that clients and servers
// send, and fails the client's end message on the connections in failEnd.
type kindCounter struct {
	client, server [kindLast + 1]atomic.Int64
	failEnd        map[uint16]bool
}

func (k *kindCounter) transport(tr Transport) Transport {
	return wrapping{tr, func(c Conn, server bool) Conn { return &kindConn{Conn: c, k: k, server: server} }}
}

type kindConn struct {
	Conn
	k      *kindCounter
	server bool
}

func (c *kindConn) Send(ctx context.Context, msg []byte) error {
	h, err := parseHeader(msg)
	if err != nil {
		return c.Conn.Send(ctx, msg)
	}
	if c.server {
		c.k.server[h.kind].Add(1)
		return c.Conn.Send(ctx, msg)
	}
	if h.kind == kindEnd && c.k.failEnd[h.conn] {
		return errInjected
	}
	c.k.client[h.kind].Add(1)
	return c.Conn.Send(ctx, msg)
}

// TestRunEndsWithOneEndAndOneResult: however many connections a run has,
// its end is one message and its result one (4,000 of each at once held
// back the last data of an incast).
func TestRunEndsWithOneEndAndOneResult(t *testing.T) {
	k := &kindCounter{}
	cfg := Config{Mode: ModeTCP, Size: 2048, Iterations: 50, Conns: 8, Bind: lo(1), Peer: lo(1), ConnectTimeout: 5 * time.Second}
	srv, cli, _, serr, cerr := pair(t, k.transport(&tcpTransport{}), cfg)
	if serr != nil || cerr != nil {
		t.Fatalf("server %v, client %v", serr, cerr)
	}
	if cli.Messages != 400 || srv.Messages != 400 || cli.FailedConnections != 0 || srv.FailedConnections != 0 {
		t.Fatalf("client %+v, server %+v", cli, srv)
	}
	if n := k.client[kindEnd].Load(); n != 1 {
		t.Errorf("client sent %d end messages, want 1", n)
	}
	if n := k.server[kindResult].Load(); n != 1 {
		t.Errorf("server sent %d results, want 1", n)
	}
	if n := k.client[kindData].Load(); n != 400 {
		t.Errorf("client sent %d data messages, want 400", n)
	}
}

// TestEndMovesToALiveConnection: when the end cannot go out on connection
// 0, it goes on connection 1; connection 0 counts as failed on both sides
// and the others are verified.
func TestEndMovesToALiveConnection(t *testing.T) {
	k := &kindCounter{failEnd: map[uint16]bool{0: true}}
	cfg := Config{Mode: ModeTCP, Size: 1024, Iterations: 40, Conns: 3, Bind: lo(1), Peer: lo(1), ConnectTimeout: 5 * time.Second}
	srv, cli, _, serr, cerr := pair(t, k.transport(&tcpTransport{}), cfg)
	if !errors.Is(cerr, ErrConnFailed) || !errors.Is(cerr, errInjected) || !errors.Is(serr, ErrConnFailed) {
		t.Fatalf("server %v, client %v", serr, cerr)
	}
	if cli.FailedConnections != 1 || cli.Messages != 80 || cli.PerConnectionBytes[0] != 0 || cli.PerConnectionBytes[2] != 40*1024 {
		t.Fatalf("client %+v", cli)
	}
	if srv.FailedConnections != 1 || len(srv.Clients) != 1 || !srv.Clients[0].Complete || srv.PerConnectionBytes[0] != 40*1024 {
		t.Fatalf("server %+v", srv)
	}
	if n := k.client[kindEnd].Load(); n != 1 {
		t.Errorf("client sent %d end messages (after the failed one), want 1", n)
	}
}

// TestConnectionsThatSentNothing: connections with no message (-D over
// before their first) never name their session to the server; the run
// still completes on the end message alone.
func TestConnectionsThatSentNothing(t *testing.T) {
	k := &kindCounter{}
	cfg := Config{Mode: ModeTCP, Size: 1024, Duration: time.Nanosecond, Conns: 4, Bind: lo(1), Peer: lo(1), ConnectTimeout: 5 * time.Second}
	srv, cli, _, serr, cerr := pair(t, k.transport(&tcpTransport{}), cfg)
	if serr != nil || cerr != nil {
		t.Fatalf("server %v, client %v", serr, cerr)
	}
	if n := k.client[kindData].Load(); n != 0 {
		t.Fatalf("client sent %d data messages; the test needs none", n)
	}
	if cli.Messages != 0 || cli.FailedConnections != 0 || len(srv.Clients) != 1 || !srv.Clients[0].Complete || srv.FailedConnections != 0 {
		t.Fatalf("client %+v, server %+v", cli, srv)
	}
}
