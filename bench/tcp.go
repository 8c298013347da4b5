package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
)

// tcpTransport is single-path TCP over the first plane, or kernel MPTCP
// starting on the first plane (subflows over the others come from the
// kernel's path manager, configured with `ip mptcp endpoint` / `limits`).
//
// The MPTCP server listens on all addresses (0.0.0.0:port), since joins of
// additional subflows arrive at the server's other plane addresses.
type tcpTransport struct {
	mptcp bool

	mu     sync.Mutex
	base   sysCounters
	baseOK bool
}

func (t *tcpTransport) Listen(ctx context.Context, cfg *Config) (Listener, error) {
	var lc net.ListenConfig
	addr := netip.AddrPortFrom(cfg.Bind[0], uint16(cfg.Port)).String()
	if t.mptcp {
		lc.SetMultipathTCP(true)
		addr = ":" + strconv.Itoa(cfg.Port)
	}
	ln, err := lc.Listen(ctx, "tcp4", addr)
	if err != nil {
		return nil, fmt.Errorf("bench: listen %s: %w", addr, err)
	}
	return &tcpListener{ln}, nil
}

func (t *tcpTransport) Dial(ctx context.Context, cfg *Config) (Conn, error) {
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(cfg.Bind[0], 0))}
	if t.mptcp {
		d.SetMultipathTCP(true)
	}
	c, err := d.DialContext(ctx, "tcp4", netip.AddrPortFrom(cfg.Peer[0], uint16(cfg.Port)).String())
	if err != nil {
		return nil, err
	}
	return newTCPConn(c), nil
}

func (t *tcpTransport) Begin(cfg *Config) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.base, t.baseOK = readSysCounters(cfg)
}

func (t *tcpTransport) End(cfg *Config) Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	now, ok := readSysCounters(cfg)
	if !ok || !t.baseOK {
		return Stats{}
	}
	return now.since(t.base)
}

type tcpListener struct{ ln net.Listener }

func (l *tcpListener) Accept(ctx context.Context) (Conn, error) {
	stop := context.AfterFunc(ctx, func() { _ = l.ln.Close() })
	defer stop()
	c, err := l.ln.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return newTCPConn(c), nil
}

func (l *tcpListener) Close() error { return l.ln.Close() }

// tcpConn frames messages on a stream by the length in their header.
type tcpConn struct {
	c net.Conn
	r *bufio.Reader
}

func newTCPConn(c net.Conn) *tcpConn {
	return &tcpConn{c: c, r: bufio.NewReaderSize(c, 256<<10)}
}

func (c *tcpConn) Send(ctx context.Context, msg []byte) error {
	stop := context.AfterFunc(ctx, func() { _ = c.c.Close() })
	defer stop()
	_, err := c.c.Write(msg)
	return err
}

func (c *tcpConn) Recv(ctx context.Context, buf []byte) ([]byte, error) {
	stop := context.AfterFunc(ctx, func() { _ = c.c.Close() })
	defer stop()
	hdr, err := c.r.Peek(HeaderLen)
	if err != nil {
		if errors.Is(err, io.EOF) && len(hdr) == 0 {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("bench: read header: %w", noEOF(err))
	}
	h, err := parseHeader(hdr)
	if err != nil {
		return nil, err
	}
	n := HeaderLen + int(h.length)
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(c.r, buf); err != nil {
		return nil, fmt.Errorf("bench: read message: %w", noEOF(err))
	}
	return buf, nil
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (c *tcpConn) RemoteAddr() string { return c.c.RemoteAddr().String() }

func (c *tcpConn) Close() error { return c.c.Close() }
