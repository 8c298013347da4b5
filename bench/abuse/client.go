package abuse

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// newClient is an HTTP client with at most conns connections, dialling from
// source (nil: the kernel's choice).
func newClient(conns int, source net.IP) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	if source != nil {
		d.LocalAddr = &net.TCPAddr{IP: source}
	}
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		DialContext: d.DialContext, MaxConnsPerHost: conns, MaxIdleConnsPerHost: conns, DisableCompression: true,
	}}
}

// hostileSource is the i-th loopback address hostile traffic comes from,
// 127.0.1.1 up to 127.0.1.<sources>.
func hostileSource(i, sources int) net.IP {
	return net.IPv4(127, 0, 1, byte(1+i%min(max(sources, 1), 254)))
}

// hostileClients are a client per hostile source sharing conns connections.
type hostileClients []*http.Client

func newHostileClients(conns, sources int) hostileClients {
	n := max(1, min(conns, sources))
	cs := make(hostileClients, n)
	for i := range cs {
		cs[i] = newClient((conns+n-1)/n, hostileSource(i, sources))
	}
	return cs
}

// pick is the client of request i.
func (cs hostileClients) pick(i int) *http.Client { return cs[i%len(cs)] }

func (cs hostileClients) close() {
	for _, c := range cs {
		c.CloseIdleConnections()
	}
}

// phase is what phases 1 and 2 start with: a context bounded by
// cfg.PhaseTimeout, fabricd's URL, hostile clients, and one client of the
// phase's own from 127.0.0.1 (the admin's, or the scraper's).
type phase struct {
	ctx     context.Context
	cancel  context.CancelFunc
	base    *url.URL
	hostile hostileClients
	own     *http.Client
}

func newPhase(ctx context.Context, t *target, cfg Config) *phase {
	p := &phase{base: apiURL(t), hostile: newHostileClients(cfg.Conns, cfg.Sources), own: newClient(1, nil)}
	p.ctx, p.cancel = context.WithTimeout(ctx, cfg.PhaseTimeout)
	return p
}

func (p *phase) close() {
	p.cancel()
	p.hostile.close()
	p.own.CloseIdleConnections()
}

// randomString is n characters drawn from alphabet.
func randomString(rng *rand.Rand, alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}

// request builds a request without parsing the (possibly huge) path.
func request(ctx context.Context, base *url.URL, method, path, rawQuery, token string) *http.Request {
	u := *base
	u.Path, u.RawQuery = path, rawQuery
	req := (&http.Request{Method: method, URL: &u, Host: u.Host, Header: http.Header{}}).WithContext(ctx)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req
}

// do sends req and reads the whole response; it returns the status (0 on a
// transport error) and the size of the body.
func do(c *http.Client, req *http.Request) (status int, n int64, err error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	n, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, n, err
}

// statusCount counts responses by status code (0: transport error).
type statusCount struct {
	mu sync.Mutex
	m  map[int]int
}

func (s *statusCount) add(status int) {
	s.mu.Lock()
	if s.m == nil {
		s.m = map[int]int{}
	}
	s.m[status]++
	s.mu.Unlock()
}

func (s *statusCount) snapshot() map[int]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int]int, len(s.m))
	for k, v := range s.m {
		out[k] = v
	}
	return out
}

// parallel runs work(i) for i in [0, n) on conns goroutines until ctx ends
// or stop returns true; it returns how many ran.
func parallel(ctx context.Context, n, conns int, stop func() bool, work func(i int)) int {
	next := make(chan int)
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			for i := range next {
				work(i)
			}
		})
	}
	sent := 0
feed:
	for sent < n && !stop() {
		select {
		case next <- sent:
			sent++
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return sent
}
