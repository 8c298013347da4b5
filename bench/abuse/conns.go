package abuse

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ConnWatch is how long one connection stayed open.
type ConnWatch struct {
	Seconds  float64 `json:"seconds"`            // until the server closed it, or the cap
	Open     bool    `json:"still_open"`         // still open at the cap
	Response string  `json:"response,omitempty"` // the status line the server sent, if any
	Error    string  `json:"error,omitempty"`    // the connection could not be set up
}

func (w ConnWatch) String() string {
	switch {
	case w.Error != "":
		return "error: " + w.Error
	case w.Open:
		return fmt.Sprintf("≥ %.0f s (still open at the cap)", w.Seconds)
	}
	s := fmt.Sprintf("%.1f s", w.Seconds)
	if w.Response != "" {
		s += " (" + w.Response + ")"
	}
	return s
}

// ConnResult is phase 4.
type ConnResult struct {
	CapSeconds    float64   `json:"cap_seconds"`
	SlowBodyAdmin ConnWatch `json:"slow_body_admin"`
	SlowBodyAnon  ConnWatch `json:"slow_body_anonymous"`
	IdleKeepAlive ConnWatch `json:"idle_keep_alive"`
	HoldSeconds   float64   `json:"idle_hold_seconds"`
	IdleAsked     int       `json:"idle_asked"` // after the open-file limit
	SilentOpened  int       `json:"idle_silent_opened"`
	SilentHeld    int       `json:"idle_silent_held"`
	AfterOpened   int       `json:"idle_after_request_opened"`
	AfterHeld     int       `json:"idle_after_request_held"`
}

// watchClose reads conn until the server closes it or cap after start
// passes, then closes it.
func watchClose(conn net.Conn, r io.Reader, start time.Time, limit time.Duration) ConnWatch {
	defer conn.Close()
	conn.SetReadDeadline(start.Add(limit))
	var w ConnWatch
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		if w.Response == "" && n > 0 {
			w.Response, _, _ = strings.Cut(string(buf[:n]), "\r\n")
		}
		if err != nil {
			w.Seconds = time.Since(start).Seconds()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				w.Open, w.Seconds = true, limit.Seconds()
			}
			return w
		}
	}
}

// dial connects to addr from source (nil: the kernel's choice).
func dial(addr string, source net.IP) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	if source != nil {
		d.LocalAddr = &net.TCPAddr{IP: source}
	}
	return d.Dial("tcp", addr)
}

// slowBody sends the headers of a PUT /api/v1/topology announcing
// cfg.SlowBodyLength bytes, then one byte every cfg.SlowBodyInterval.
func slowBody(ctx context.Context, addr string, source net.IP, token string, cfg Config) ConnWatch {
	conn, err := dial(addr, source)
	if err != nil {
		return ConnWatch{Error: err.Error()}
	}
	hdr := fmt.Sprintf("PUT /api/v1/topology HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", addr, cfg.SlowBodyLength)
	if token != "" {
		hdr += "Authorization: Bearer " + token + "\r\n"
	}
	start := time.Now()
	if _, err := io.WriteString(conn, hdr+"\r\n"); err != nil {
		conn.Close()
		return ConnWatch{Error: err.Error()}
	}
	closed := make(chan ConnWatch, 1)
	go func() { closed <- watchClose(conn, conn, start, cfg.ConnCap) }()
	tick := time.NewTicker(cfg.SlowBodyInterval)
	defer tick.Stop()
	for sent := 0; ; {
		select {
		case w := <-closed:
			return w
		case <-ctx.Done():
			conn.Close()
			return <-closed
		case <-tick.C:
			if sent < cfg.SlowBodyLength-1 {
				conn.Write([]byte{' '}) // JSON whitespace; an error shows as the close
				sent++
			}
		}
	}
}

// afterRequest dials, sends one unauthenticated GET /api/v1/planes and reads
// the answer, leaving the connection idle (keep-alive).
func afterRequest(addr string, source net.IP) (net.Conn, *bufio.Reader, error) {
	conn, err := dial(addr, source)
	if err != nil {
		return nil, nil, err
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	_, err = io.WriteString(conn, "GET /api/v1/planes HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
	if err == nil {
		var resp *http.Response
		if resp, err = http.ReadResponse(br, nil); err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	conn.SetDeadline(time.Time{})
	return conn, br, nil
}

// openFiles is the soft limit on open files.
func openFiles() int {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil || l.Cur > 1<<20 {
		return 1 << 20
	}
	return int(l.Cur)
}

// runConns watches, at the same time: a slow body with the admin token and
// one without (from a hostile source), an idle keep-alive connection after one request, and
// cfg.IdleConns idle connections (half never send a byte, half after one
// unauthenticated request), counting those still open after cfg.IdleHold.
func runConns(ctx context.Context, t *target, cfg Config, logger *slog.Logger) (*ConnResult, error) {
	addr := apiURL(t).Host
	res := &ConnResult{CapSeconds: cfg.ConnCap.Seconds(), HoldSeconds: cfg.IdleHold.Seconds(),
		IdleAsked: max(0, min(cfg.IdleConns, openFiles()-512))}
	var wg sync.WaitGroup
	wg.Go(func() { res.SlowBodyAdmin = slowBody(ctx, addr, nil, t.fd.Token(), cfg) })
	wg.Go(func() { res.SlowBodyAnon = slowBody(ctx, addr, hostileSource(0, cfg.Sources), "", cfg) })
	wg.Go(func() {
		conn, br, err := afterRequest(addr, hostileSource(1, cfg.Sources))
		if err != nil {
			res.IdleKeepAlive = ConnWatch{Error: err.Error()}
			return
		}
		res.IdleKeepAlive = watchClose(conn, br, time.Now(), cfg.ConnCap)
	})

	var silentOpened, silentHeld, afterOpened, afterHeld atomic.Int64
	var idle sync.WaitGroup
	parallel(ctx, res.IdleAsked, 16, func() bool { return false }, func(i int) {
		var conn net.Conn
		var r io.Reader
		var err error
		opened, held := &silentOpened, &silentHeld
		if i%2 == 0 {
			conn, err = dial(addr, hostileSource(i, cfg.Sources))
			r = conn
		} else {
			opened, held = &afterOpened, &afterHeld
			conn, r, err = afterRequest(addr, hostileSource(i, cfg.Sources))
		}
		if err != nil {
			return
		}
		opened.Add(1)
		idle.Go(func() {
			if watchClose(conn, r, time.Now(), cfg.IdleHold).Open {
				held.Add(1)
			}
		})
	})
	idle.Wait()
	res.SilentOpened, res.SilentHeld = int(silentOpened.Load()), int(silentHeld.Load())
	res.AfterOpened, res.AfterHeld = int(afterOpened.Load()), int(afterHeld.Load())
	logger.Info("idle connections counted", "silent_held", res.SilentHeld, "after_request_held", res.AfterHeld)
	wg.Wait()
	return res, nil
}
