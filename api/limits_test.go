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
	"sync"
	"sync/atomic"
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
	f := newFixture(t, withLimits(api.Limits{FailedAuthDelay: time.Millisecond}))
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
	f := newFixture(t, withLimits(api.Limits{FailedAuthBurst: 10, FailedAuthRate: 0.001, FailedAuthDelay: time.Millisecond}))
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

// Concurrent look-ups from one address cannot overdraw its budget: each
// reserves its failure before it asks the store.
func TestFailedAuthenticationBudgetHoldsUnderConcurrency(t *testing.T) {
	f := newFixture(t, withLimits(api.Limits{FailedAuthBurst: 10, FailedAuthRate: 0.001, FailedAuthDelay: time.Millisecond}))
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range 60 {
		wg.Go(func() {
			code := f.from("10.8.0.1", "GET", "/api/v1/planes", "mpt_bogus").Code
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[401] != 10 || codes[429] != 50 {
		t.Errorf("60 concurrent bad tokens from one address: %v, want 10 x 401 and 50 x 429", codes)
	}
	// A good token from the same address still gets in once it was seen
	// (the store is not asked again within auth.CacheTTL).
	if rec := f.from("10.8.0.2", "GET", "/api/v1/planes", f.admin); rec.Code != 200 {
		t.Fatalf("admin = %d", rec.Code)
	}
	if rec := f.from("10.8.0.1", "GET", "/api/v1/planes", f.admin); rec.Code != 200 {
		t.Errorf("a token known good, from an address over its budget = %d, want 200", rec.Code)
	}
}

// A refused address waits for its 429, so a flood of bad tokens over a few
// connections makes a few requests a second, not thousands.
func TestFailedAuthenticationFloodIsHeldBack(t *testing.T) {
	const delay = 300 * time.Millisecond
	f := newFixture(t, withLimits(api.Limits{FailedAuthBurst: 5, FailedAuthRate: 0.001, FailedAuthDelay: delay}))
	for range 5 {
		f.from("10.7.0.1", "GET", "/api/v1/planes", "mpt_bogus")
	}
	start := time.Now()
	rec := f.from("10.7.0.1", "GET", "/api/v1/planes", "mpt_bogus")
	if took := time.Since(start); rec.Code != 429 || took < delay/2 || took > delay*3/2+time.Second {
		t.Fatalf("over budget: %d after %v, want 429 after %v ± 50%%", rec.Code, took, delay)
	}
	// Eight flooding connections for 1.5 s: every refusal is held for the
	// tarpit's delay, jittered between delay/2 and 3 delay/2, so each
	// connection makes at most 1.5 s / (delay/2) + 1 requests (it was a
	// bound of 6 each, the mean, which a run of short delays exceeded).
	var sent atomic.Int64
	var mu sync.Mutex
	shortest := time.Hour
	var wg sync.WaitGroup
	stop := time.Now().Add(1500 * time.Millisecond)
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				start := time.Now()
				f.from("10.7.0.1", "GET", "/api/v1/planes", "mpt_bogus")
				took := time.Since(start)
				sent.Add(1)
				mu.Lock()
				shortest = min(shortest, took)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if shortest < delay/2 {
		t.Errorf("a refusal in the flood came back after %v; the tarpit holds each at least %v", shortest, delay/2)
	}
	if n, most := sent.Load(), int64(8*(1500*time.Millisecond/(delay/2)+1)); n > most {
		t.Errorf("8 connections flooding for 1.5 s made %d requests; want at most %d", n, most)
	}
	// Someone else is not held back.
	start = time.Now()
	if rec := f.from("10.7.0.2", "GET", "/api/v1/planes", f.admin); rec.Code != 200 || time.Since(start) > delay {
		t.Errorf("another address: %d after %v", rec.Code, time.Since(start))
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

// refusedAtAccept reports whether the server closed c without serving it:
// a request on it gets no response.
func refusedAtAccept(c net.Conn) bool {
	fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := http.ReadResponse(bufio.NewReader(c), nil)
	return err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestConnectionsHaveTimeoutsAndACap(t *testing.T) {
	f := newFixture(t, withLimits(api.Limits{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 500 * time.Millisecond,
		WriteTimeout: 500 * time.Millisecond, IdleTimeout: 500 * time.Millisecond, MaxConnections: 4, MaxConnsPerClient: 3}))
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
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil && resp.StatusCode != 408 {
			t.Errorf("a body too slow to arrive = %d, want 408 (the client's fault, not a store's)", resp.StatusCode)
		}
	})
	t.Run("truncated body", func(t *testing.T) {
		c := dial()
		fmt.Fprintf(c, "PUT /api/v1/rate-classes/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\n{\"priorit", f.admin)
		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 400 {
			t.Errorf("a body cut short: %v %v, want 400", resp, err)
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
	dialFrom := func(ip string) net.Conn {
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// holdFrom opens a connection kept busy by an event stream: a silent
	// one would close at the 300 ms header timeout, freeing its slot
	// before the cap is tried on a loaded machine.
	holdFrom := func(ip string) net.Conn {
		c := dialFrom(ip)
		fmt.Fprintf(c, "GET /api/v1/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", f.admin)
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream to hold a connection: %v", err)
		}
		return c
	}
	t.Run("connection cap per client address", func(t *testing.T) {
		var held []net.Conn
		for range 3 {
			held = append(held, holdFrom("127.0.0.1"))
		}
		if !refusedAtAccept(dial()) {
			t.Errorf("a fourth connection from one address was served with a cap of 3 per address")
		}
		other, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		fmt.Fprint(other, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		if resp, err := http.ReadResponse(bufio.NewReader(other), nil); err != nil || resp.StatusCode != 200 {
			t.Errorf("another address was refused while one address held its cap: %v", err)
		}
		for _, c := range held {
			c.Close()
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
		held := []net.Conn{holdFrom("127.0.0.1"), holdFrom("127.0.0.1"), holdFrom("127.0.0.2"), holdFrom("127.0.0.3")}
		if !refusedAtAccept(dialFrom("127.0.0.4")) {
			t.Errorf("a fifth connection was served with a cap of 4")
		}
		for _, c := range held {
			c.Close()
		}
	})
}

func TestFailedAuthenticationNeverRefusesTheInnocent(t *testing.T) {
	f := newFixture(t, withLimits(api.Limits{FailedAuthBurst: 1, FailedAuthRate: 0.001, FailedAuthDelay: time.Millisecond}))
	for i := range 4200 { // more addresses than the limiter keeps
		addr := fmt.Sprintf("10.4.%d.%d", i/250, i%250)
		f.from(addr, "GET", "/api/v1/planes", "mpt_bogus")
		f.from(addr, "GET", "/api/v1/planes", "mpt_bogus")
	}
	for _, addr := range []string{"10.5.0.1", "10.5.0.2", "192.0.2.77"} {
		if rec := f.from(addr, "GET", "/api/v1/planes", f.admin); rec.Code != 200 {
			t.Errorf("a valid token from %s, which never failed, = %d after a flood from 4,200 other addresses", addr, rec.Code)
		}
	}
}

func TestRequestsInProgressAreCappedPerToken(t *testing.T) {
	f := newFixture(t, withLimits(api.Limits{MaxRequestsPerTok: 2}))
	f.loadExample()
	srv := httptest.NewServer(f.srv)
	t.Cleanup(srv.Close)
	viewer := f.mint("viewer", auth.RoleViewer)
	for range 2 { // streams are requests in progress
		req, _ := http.NewRequest("GET", srv.URL+"/api/v1/stream", nil)
		req.Header.Set("Authorization", "Bearer "+viewer)
		resp, err := srv.Client().Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream: %v", err)
		}
		t.Cleanup(func() { resp.Body.Close() })
	}
	if rec := f.from("10.6.0.1", "GET", "/api/v1/planes", viewer); rec.Code != 429 {
		t.Errorf("a third request in progress for one token = %d, want 429", rec.Code)
	}
	if rec := f.from("10.6.0.1", "GET", "/api/v1/planes", f.admin); rec.Code != 200 {
		t.Errorf("another token = %d, want 200", rec.Code)
	}
}

func TestStreamEndsWhenItsTokenIsRevoked(t *testing.T) {
	f := newFixture(t, withLimits(api.Limits{StreamHeartbeat: 50 * time.Millisecond}))
	f.loadExample()
	srv := httptest.NewServer(f.srv)
	t.Cleanup(srv.Close)
	secret, tok, err := f.tokens.Mint(context.Background(), "short", auth.RoleViewer, "test", 0)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", srv.URL+"/api/v1/stream", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := srv.Client().Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v", err)
	}
	defer resp.Body.Close()
	if r := f.do("DELETE", fmt.Sprint("/api/v1/tokens/", tok.ID), f.admin, nil); r.Code != 204 {
		t.Fatalf("revoke = %d", r.Code)
	}
	ended := make(chan string, 1)
	go func() {
		body, _ := io.ReadAll(resp.Body) // until the server ends the stream
		ended <- string(body)
	}()
	select {
	case body := <-ended:
		if !strings.Contains(body, "event: end") {
			t.Errorf("the stream ended without an end event: %q", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a revoked token's stream was still open after 10s (heartbeat 50ms)")
	}
}

func TestMetricsAreGatheredAtMostOnceASecond(t *testing.T) {
	f := newFixture(t)
	first := f.from("10.7.0.1", "GET", "/metrics", "").Body.String()
	for range 20 {
		f.from("10.7.0.1", "GET", "/api/v1/planes", f.admin) // counters move
	}
	if again := f.from("10.7.0.1", "GET", "/metrics", "").Body.String(); again != first {
		t.Errorf("/metrics was gathered again within a second")
	}
	testutil.WaitFor(t, 5*time.Second, "/metrics to be gathered anew", func() bool {
		return f.from("10.7.0.1", "GET", "/metrics", "").Body.String() != first
	})
}

func TestAnonymousSummariesAreBoundedPerFlush(t *testing.T) {
	f := newFixture(t)
	for i := range 1000 {
		f.from(fmt.Sprintf("10.8.%d.%d", i/250, i%250), "DELETE", "/api/v1/tokens/1", "")
	}
	f.srv.FlushAudit()
	var rows, requests int64
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*), coalesce(sum((detail->>'requests')::int), 0) FROM audit_log WHERE actor = 'anonymous'`).Scan(&rows, &requests); err != nil {
		t.Fatal(err)
	}
	if rows > 65 || requests != 1000 {
		t.Errorf("1,000 anonymous requests from 1,000 addresses: %d summary rows counting %d requests; want at most 65 rows counting all", rows, requests)
	}
}
