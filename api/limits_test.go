package api_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/multiplane/multiplane/api"
	"github.com/multiplane/multiplane/auth"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/planes"
)

func withLimits(l api.Limits) func(*api.Deps) { return func(d *api.Deps) { d.Limits = l } }

// from sends a request from client address addr (the connection's, as the
// server sees it).
func (f *fixture) from(addr, method, path, token string, headers ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	req.RemoteAddr = addr + ":40000"
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	f.srv.ServeHTTP(rec, req)
	return rec
}

func TestAnonymousRequestsCostNoStoragePerRequest(t *testing.T) {
	f := newFixture(t)
	big := "/api/v1/drains/" + strings.Repeat("a", 100<<10)
	for i := range 300 {
		addr := fmt.Sprintf("10.1.0.%d", i%3)
		if rec := f.from(addr, "DELETE", big, ""); rec.Code != 401 && rec.Code != 429 {
			t.Fatalf("anonymous DELETE = %d", rec.Code)
		}
	}
	f.srv.FlushAudit()
	var rows, bytes, requests int64
	err := f.pool.QueryRow(context.Background(), `SELECT count(*), coalesce(sum(octet_length(path) + octet_length(target) + octet_length(coalesce(detail::text, ''))), 0),
		coalesce(sum((detail->>'requests')::int), 0) FROM audit_log WHERE actor = 'anonymous'`).Scan(&rows, &bytes, &requests)
	if err != nil {
		t.Fatal(err)
	}
	// One summary per address and status (401, then 429 once the address is limited).
	if rows > 6 || bytes > 2000 || requests != 300 {
		t.Errorf("300 anonymous 100 KB requests left %d audit rows, %d bytes of path/target/detail, counting %d requests; want <= 6 rows, <= 2000 bytes, 300 requests",
			rows, bytes, requests)
	}
	viewer := f.mint("viewer", auth.RoleViewer)
	if rec := f.from("10.1.1.1", "DELETE", big, viewer); rec.Code != 403 {
		t.Fatalf("viewer DELETE = %d", rec.Code)
	}
	var pathLen, targetLen int
	err = f.pool.QueryRow(context.Background(), `SELECT octet_length(path), octet_length(target) FROM audit_log WHERE actor = 'viewer'`).Scan(&pathLen, &targetLen)
	if err != nil || pathLen > 300 || targetLen > 300 {
		t.Errorf("refused viewer request audited with path %d bytes, target %d bytes (%v); want at most 300 each", pathLen, targetLen, err)
	}
	r := f.do("GET", "/api/v1/audit?limit=1000", f.admin, nil)
	if r.Code != 200 || len(r.Body) > 20000 {
		t.Errorf("GET /audit = %d, %d bytes", r.Code, len(r.Body))
	}
}

func TestMetricLabelsDoNotComeFromClients(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFixture(t, func(d *api.Deps) { d.Registry = reg })
	series := func() int {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, mf := range mfs {
			n += len(mf.GetMetric())
		}
		return n
	}
	f.from("10.2.0.1", "GET", "/healthz", "")
	f.from("10.2.0.1", "BREW", "/healthz", "")
	before := series()
	for range 300 {
		m := make([]byte, 12)
		for i := range m {
			m[i] = byte('A' + rand.IntN(26))
		}
		f.from("10.2.0.1", string(m), "/healthz", "")
		f.from("10.2.0.1", string(m), "/api/v1/"+string(m), f.admin)
	}
	if after := series(); after > before+2 {
		t.Errorf("300 random methods grew the metric series from %d to %d", before, after)
	}
}

func TestFailedAuthenticationIsLimitedPerAddress(t *testing.T) {
	f := newFixture(t, withLimits(api.Limits{FailedAuthBurst: 10, FailedAuthRate: 0.001}))
	codes := map[int]int{}
	for range 30 {
		codes[f.from("10.3.0.1", "GET", "/api/v1/planes", "mpt_bogus").Code]++
	}
	if codes[401] != 10 || codes[429] != 20 {
		t.Errorf("30 bad tokens from one address: %v, want 10 x 401 then 20 x 429", codes)
	}
	rec := f.from("10.3.0.1", "GET", "/api/v1/planes", "mpt_bogus")
	if rec.Header().Get("Retry-After") == "" {
		t.Errorf("429 without Retry-After")
	}
	if rec := f.from("10.3.0.2", "GET", "/api/v1/planes", f.admin); rec.Code != 200 {
		t.Errorf("another address with a valid token = %d, want 200", rec.Code)
	}
	// X-Forwarded-For is the client's word, not its address.
	if rec := f.from("10.3.0.1", "GET", "/api/v1/planes", "mpt_bogus", "X-Forwarded-For", "10.9.9.9"); rec.Code != 429 {
		t.Errorf("a limited address escaped with X-Forwarded-For: %d", rec.Code)
	}
}

func TestEventStreamsAreCapped(t *testing.T) {
	f := newFixture(t, withLimits(api.Limits{MaxStreams: 3, MaxStreamsPerTok: 2}))
	f.loadExample()
	srv := httptest.NewServer(f.srv)
	t.Cleanup(srv.Close)
	a, b := f.mint("a", auth.RoleViewer), f.mint("b", auth.RoleViewer)
	open := func(token string) (*http.Response, func()) {
		req, _ := http.NewRequest("GET", srv.URL+"/api/v1/stream", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp, func() { resp.Body.Close() }
	}
	var closers []func()
	t.Cleanup(func() {
		for _, c := range closers {
			c()
		}
	})
	want := []struct {
		token string
		code  int
	}{{a, 200}, {a, 200}, {a, 429}, {b, 200}, {b, 429}}
	for i, w := range want {
		resp, closeIt := open(w.token)
		closers = append(closers, closeIt)
		if resp.StatusCode != w.code {
			t.Fatalf("stream %d = %d, want %d", i, resp.StatusCode, w.code)
		}
		if w.code == 429 {
			body, _ := io.ReadAll(resp.Body)
			if !strings.Contains(string(body), "too_many_streams") {
				t.Errorf("429 body %s", body)
			}
		} else {
			bufio.NewReader(resp.Body).ReadString('\n') // the first event has been sent
		}
	}
	closers[0]()
	testutil.WaitFor(t, 5*time.Second, "a closed stream's slot to be free", func() bool {
		resp, closeIt := open(b)
		closers = append(closers, closeIt)
		return resp.StatusCode == 200
	})
}

// serve runs the API as fabricd does: its http.Server and listener limits.
func serve(t *testing.T, f *fixture) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := f.srv.HTTPServer(testenv.Logger(t))
	go srv.Serve(f.srv.LimitListener(ln))
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// closedWithin reports whether the server closes conn within d.
func closedWithin(conn net.Conn, d time.Duration) bool {
	conn.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, conn)
	return !isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestConnectionsHaveTimeoutsAndACap(t *testing.T) {
	f := newFixture(t, withLimits(api.Limits{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 500 * time.Millisecond,
		WriteTimeout: 500 * time.Millisecond, IdleTimeout: 500 * time.Millisecond, MaxConnections: 4}))
	f.loadExample()
	addr := serve(t, f)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	t.Run("slow body", func(t *testing.T) {
		c := dial()
		fmt.Fprintf(c, "PUT /api/v1/topology HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100000\r\n\r\n", f.admin)
		start := time.Now()
		for time.Since(start) < 5*time.Second {
			if _, err := c.Write([]byte("a")); err != nil {
				break
			}
			c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
				break // the server answered or closed
			}
		}
		if took := time.Since(start); took >= 5*time.Second {
			t.Errorf("a body sent a byte at a time was still being read after %v (read timeout 500ms)", took)
		}
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		c := dial()
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("healthz: %v", err)
		}
		if !closedWithin(c, 5*time.Second) {
			t.Errorf("an idle keep-alive connection stayed open for 5s (idle timeout 500ms)")
		}
	})
	t.Run("silent connection", func(t *testing.T) {
		if !closedWithin(dial(), 5*time.Second) {
			t.Errorf("a connection that sent nothing stayed open for 5s (header timeout 300ms)")
		}
	})
	t.Run("stream outlives the request timeouts", func(t *testing.T) {
		req, _ := http.NewRequest("GET", "http://"+addr+"/api/v1/stream", nil)
		req.Header.Set("Authorization", "Bearer "+f.admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream: %v", err)
		}
		defer resp.Body.Close()
		lines := make(chan string, 64)
		go func() {
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		time.Sleep(1500 * time.Millisecond) // three read and write timeouts pass with nothing to send
		f.engine.ObserveInterfaces([]planes.InterfaceSample{{Switch: "p2-sw1", Interface: "Ethernet0", At: time.Now(), Oper: planes.OperDown}})
		deadline := time.After(5 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatal("the stream ended before the change arrived")
				}
				if l == "event: state_change" {
					return
				}
			case <-deadline:
				t.Fatal("no state_change within 5s")
			}
		}
	})
	t.Run("connection cap", func(t *testing.T) {
		testutil.WaitFor(t, 5*time.Second, "earlier connections to close", func() bool {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return false
			}
			defer c.Close()
			fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			return err == nil && resp.StatusCode == 200
		})
		var held []net.Conn
		for range 4 {
			held = append(held, dial())
		}
		extra := dial()
		if !closedWithin(extra, time.Second) {
			t.Errorf("a fifth connection was kept with a cap of 4")
		}
		for _, c := range held {
			c.Close()
		}
	})
}
