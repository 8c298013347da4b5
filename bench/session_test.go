package bench

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
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
	// Connection 0's data may still be arriving when the end names it
	// failed; the result does not wait for it.
	if srv.FailedConnections != 1 || len(srv.Clients) != 1 || !srv.Clients[0].Complete ||
		srv.PerConnectionBytes[0] > 40*1024 || srv.PerConnectionBytes[1] != 40*1024 || srv.PerConnectionBytes[2] != 40*1024 {
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

// stalling stops the server's receiving on connection 1 after its first
// message until the server has sent the run's result.
type stalling struct {
	once     sync.Once
	resulted chan struct{}
}

func (st *stalling) transport(tr Transport) Transport {
	return wrapping{tr, func(c Conn, server bool) Conn {
		if !server {
			return c
		}
		return &stallConn{Conn: c, st: st}
	}}
}

type stallConn struct {
	Conn
	st   *stalling
	conn int // 1 + the connection's index, once known
}

func (c *stallConn) Recv(ctx context.Context, buf []byte) ([]byte, error) {
	if c.conn == 2 {
		c.conn = -1 // once
		select {
		case <-c.st.resulted:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	msg, err := c.Conn.Recv(ctx, buf)
	if h, herr := parseHeader(msg); err == nil && herr == nil && c.conn == 0 {
		c.conn = int(h.conn) + 1
	}
	return msg, err
}

func (c *stallConn) Send(ctx context.Context, msg []byte) error {
	err := c.Conn.Send(ctx, msg)
	if h, herr := parseHeader(msg); herr == nil && h.kind == kindResult {
		c.st.once.Do(func() { close(c.st.resulted) })
	}
	return err
}

// TestSlowConnectionFailsAlone: when a connection's data has not all
// arrived endWait after the end message, the server answers with what
// did; that connection fails on both sides, the others are verified.
func TestSlowConnectionFailsAlone(t *testing.T) {
	defer func(w time.Duration) { endWait = w }(endWait)
	endWait = 300 * time.Millisecond
	st := &stalling{resulted: make(chan struct{})}
	cfg := Config{Mode: ModeTCP, Size: 1024, Iterations: 10, Conns: 3, Bind: lo(1), Peer: lo(1), ConnectTimeout: 5 * time.Second}
	srv, cli, _, serr, cerr := pair(t, st.transport(&tcpTransport{}), cfg)
	if !errors.Is(cerr, ErrConnFailed) || errors.Is(cerr, ErrVerify) || !errors.Is(serr, ErrConnFailed) {
		t.Fatalf("server %v, client %v", serr, cerr)
	}
	if cli.FailedConnections != 1 || cli.Messages != 20 || cli.PerConnectionBytes[1] != 0 {
		t.Fatalf("client %+v", cli)
	}
	if srv.FailedConnections != 1 || srv.PerConnectionBytes[1] != 1024 || srv.PerConnectionBytes[2] != 10*1024 {
		t.Fatalf("server %+v", srv)
	}
}

// stuckSend blocks the client's second data message on connection 1 until
// the connection is closed, as a starved TCP connection's write does.
type stuckSend struct{}

func (stuckSend) transport(tr Transport) Transport {
	return wrapping{tr, func(c Conn, server bool) Conn {
		if server {
			return c
		}
		return &stuckConn{Conn: c, closed: make(chan struct{})}
	}}
}

type stuckConn struct {
	Conn
	sent   int
	once   sync.Once
	closed chan struct{}
}

func (c *stuckConn) Send(ctx context.Context, msg []byte) error {
	if h, err := parseHeader(msg); err == nil && h.conn == 1 && h.kind == kindData {
		if c.sent++; c.sent > 1 {
			select {
			case <-c.closed:
				return net.ErrClosed
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return c.Conn.Send(ctx, msg)
}

func (c *stuckConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// TestStuckSenderIsAbandoned: a connection still handing a message to its
// transport sendGrace after -D is closed and counts as failed; the run's
// end goes out for the others, which are verified.
func TestStuckSenderIsAbandoned(t *testing.T) {
	defer func(g time.Duration) { sendGrace = g }(sendGrace)
	sendGrace = 300 * time.Millisecond
	cfg := Config{Mode: ModeTCP, Size: 1024, Duration: 200 * time.Millisecond, Conns: 3, Bind: lo(1), Peer: lo(1), ConnectTimeout: 5 * time.Second}
	srv, cli, _, serr, cerr := pair(t, stuckSend{}.transport(&tcpTransport{}), cfg)
	if !errors.Is(cerr, ErrConnFailed) || !errors.Is(cerr, net.ErrClosed) || !strings.Contains(cerr.Error(), "still sending") || !errors.Is(serr, ErrConnFailed) {
		t.Fatalf("server %v, client %v", serr, cerr)
	}
	if cli.FailedConnections != 1 || cli.PerConnectionBytes[1] != 0 || cli.PerConnectionBytes[0] == 0 || cli.PerConnectionBytes[2] == 0 {
		t.Fatalf("client %+v", cli)
	}
	if srv.FailedConnections != 1 || len(srv.Clients) != 1 || !srv.Clients[0].Complete || srv.Bytes != cli.Bytes+1024 {
		t.Fatalf("server %+v, client %+v", srv, cli)
	}
}
