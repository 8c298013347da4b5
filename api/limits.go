package api

import (
	"context"
	"flag"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Limits bound what one client, or all of them, can hold of fabricd.
type Limits struct {
	ReadHeaderTimeout time.Duration // request line and headers
	ReadTimeout       time.Duration // a whole request, body included (not the event stream)
	WriteTimeout      time.Duration // a whole response (the event stream: each write)
	IdleTimeout       time.Duration // a keep-alive connection between requests
	MaxHeaderBytes    int           // request line and headers
	MaxConnections    int           // open connections; more are closed at once
	MaxConnsPerClient int           // open connections from one client address
	MaxRequestsPerTok int           // requests in progress per token (streams included)
	MaxStreams        int           // event streams in total
	MaxStreamsPerTok  int           // event streams per token
	FailedAuthRate    float64       // failed authentications per second per client address, sustained
	FailedAuthBurst   int           // failed authentications per client address before the rate applies
	FailedAuthDelay   time.Duration // how long a client over its failed-authentication budget waits for its 429
	AuditFlush        time.Duration // how often refused anonymous requests are summarised in the audit log
	StreamHeartbeat   time.Duration // event stream keep-alive, and how often a stream's token is checked again
}

// DefaultLimits returns the limits fabricd runs with unless told otherwise.
func DefaultLimits() Limits {
	return Limits{
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 20 * time.Second, WriteTimeout: 60 * time.Second,
		IdleTimeout: 20 * time.Second, MaxHeaderBytes: 64 << 10, MaxConnections: 2048, MaxConnsPerClient: 128, MaxRequestsPerTok: 32,
		MaxStreams: 256, MaxStreamsPerTok: 8, FailedAuthRate: 5, FailedAuthBurst: 20, FailedAuthDelay: time.Second, AuditFlush: 10 * time.Second,
		StreamHeartbeat: 15 * time.Second,
	}
}

// RegisterFlags registers every limit on fs.
func (l *Limits) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&l.ReadHeaderTimeout, "http-read-header-timeout", l.ReadHeaderTimeout, "time a client has to send a request's line and headers")
	fs.DurationVar(&l.ReadTimeout, "http-read-timeout", l.ReadTimeout, "time a client has to send a whole request, body included")
	fs.DurationVar(&l.WriteTimeout, "http-write-timeout", l.WriteTimeout, "time to write a response (for the event stream: each event)")
	fs.DurationVar(&l.IdleTimeout, "http-idle-timeout", l.IdleTimeout, "how long an idle keep-alive connection stays open")
	fs.IntVar(&l.MaxHeaderBytes, "http-max-header-bytes", l.MaxHeaderBytes, "largest request line plus headers")
	fs.IntVar(&l.MaxConnections, "http-max-connections", l.MaxConnections, "open API connections at most; more are closed at once")
	fs.IntVar(&l.MaxConnsPerClient, "http-max-connections-per-client", l.MaxConnsPerClient, "open API connections from one client address at most")
	fs.IntVar(&l.MaxRequestsPerTok, "max-requests-per-token", l.MaxRequestsPerTok, "requests one token may have in progress at once, streams included (more get 429)")
	fs.IntVar(&l.MaxStreams, "max-event-streams", l.MaxStreams, "concurrent /api/v1/stream clients in total (more get 429)")
	fs.IntVar(&l.MaxStreamsPerTok, "max-event-streams-per-token", l.MaxStreamsPerTok, "concurrent /api/v1/stream clients per token (more get 429)")
	fs.Float64Var(&l.FailedAuthRate, "failed-auth-rate", l.FailedAuthRate, "failed authentications per second a client address may sustain before it gets 429")
	fs.IntVar(&l.FailedAuthBurst, "failed-auth-burst", l.FailedAuthBurst, "failed authentications a client address may make at once")
	fs.DurationVar(&l.FailedAuthDelay, "failed-auth-delay", l.FailedAuthDelay, "how long an address over its failed-authentication budget waits for each 429 before it is disconnected")
	fs.DurationVar(&l.StreamHeartbeat, "stream-heartbeat", l.StreamHeartbeat, "event stream keep-alive interval; a stream whose token expired or was revoked ends at the next one")
	fs.DurationVar(&l.AuditFlush, "audit-anonymous-flush", l.AuditFlush, "interval at which refused unauthenticated requests are summarised in the audit log")
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	set := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&l.ReadHeaderTimeout, d.ReadHeaderTimeout)
	set(&l.ReadTimeout, d.ReadTimeout)
	set(&l.WriteTimeout, d.WriteTimeout)
	set(&l.IdleTimeout, d.IdleTimeout)
	set(&l.AuditFlush, d.AuditFlush)
	set(&l.StreamHeartbeat, d.StreamHeartbeat)
	set(&l.FailedAuthDelay, d.FailedAuthDelay)
	for _, p := range []struct{ v, def *int }{{&l.MaxHeaderBytes, &d.MaxHeaderBytes}, {&l.MaxConnections, &d.MaxConnections},
		{&l.MaxConnsPerClient, &d.MaxConnsPerClient}, {&l.MaxRequestsPerTok, &d.MaxRequestsPerTok},
		{&l.MaxStreams, &d.MaxStreams}, {&l.MaxStreamsPerTok, &d.MaxStreamsPerTok}, {&l.FailedAuthBurst, &d.FailedAuthBurst}} {
		if *p.v <= 0 {
			*p.v = *p.def
		}
	}
	if l.FailedAuthRate <= 0 {
		l.FailedAuthRate = d.FailedAuthRate
	}
	return l
}

// HTTPServer returns an http.Server for h with the limits' timeouts; serve
// it on LimitListener(ln). The event stream lifts its own read deadline and
// sets a write deadline per event, so these timeouts do not end it.
func (s *Server) HTTPServer(logger *slog.Logger) *http.Server {
	l := s.limits
	srv := &http.Server{
		Handler: s, ReadHeaderTimeout: l.ReadHeaderTimeout, ReadTimeout: l.ReadTimeout,
		WriteTimeout: l.WriteTimeout, IdleTimeout: l.IdleTimeout, MaxHeaderBytes: l.MaxHeaderBytes,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(s.Shutdown)
	return srv
}

// LimitListener closes connections beyond the configured maxima (in all,
// and per client address) as soon as they are accepted, so a flood of idle
// connections cannot exhaust file descriptors or memory, and one address
// cannot take every connection.
func (s *Server) LimitListener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, max: s.limits.MaxConnections, perClient: s.limits.MaxConnsPerClient,
		clients: map[netip.Addr]int{}, refused: s.metrics.refusedConns}
}

type limitListener struct {
	net.Listener
	mu             sync.Mutex
	open           int
	clients        map[netip.Addr]int // open connections per address; at most max entries
	max, perClient int
	refused        interface{ Inc() }
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := clientAddr(c.RemoteAddr())
		if !l.take(addr) {
			l.refused.Inc()
			c.Close()
			continue
		}
		return &countedConn{Conn: c, l: l, addr: addr}, nil
	}
}

func clientAddr(a net.Addr) netip.Addr {
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

func (l *limitListener) take(addr netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open >= l.max || l.clients[addr] >= l.perClient {
		return false
	}
	l.open++
	l.clients[addr]++
	return true
}

func (l *limitListener) release(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.clients[addr]--; l.clients[addr] <= 0 {
		delete(l.clients, addr)
	}
}

type countedConn struct {
	net.Conn
	l    *limitListener
	addr netip.Addr
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.release(c.addr) })
	return c.Conn.Close()
}

// slots counts what is held (event streams, requests in progress) in total
// and per token.
type slots struct {
	mu       sync.Mutex
	total    int
	perToken map[int64]int
	max, per int
}

func newSlots(max, per int) *slots { return &slots{perToken: map[int64]int{}, max: max, per: per} }

// Outcomes of slots.acquire.
const (
	slotTaken = iota
	slotsFull
	slotsFullForToken
)

func (s *slots) acquire(token int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.total >= s.max:
		return slotsFull
	case s.perToken[token] >= s.per:
		return slotsFullForToken
	}
	s.total++
	s.perToken[token]++
	return slotTaken
}

func (s *slots) release(token int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.perToken[token]--; s.perToken[token] <= 0 {
		delete(s.perToken, token)
	}
}

// tarpit delays the answers to clients refused for failed authentication
// by Limits.FailedAuthDelay, so a flood of bad tokens runs at the speed of
// its connections, not of fabricd. At most maxTarpitted answers wait at
// once; past that they go out at once.
type tarpit struct {
	slots    chan struct{}
	maxDelay time.Duration
}

const maxTarpitted = 256

func newTarpit(maxDelay time.Duration) *tarpit {
	return &tarpit{slots: make(chan struct{}, maxTarpitted), maxDelay: maxDelay}
}

// hold waits for about maxDelay or until ctx ends, when a slot is free; it
// reports whether it waited.
func (t *tarpit) hold(ctx context.Context) bool {
	select {
	case t.slots <- struct{}{}:
	default:
		return false
	}
	defer func() { <-t.slots }()
	timer := time.NewTimer(t.maxDelay/2 + rand.N(t.maxDelay)) // jittered: held clients do not come back in waves
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
	return true
}

// authLimiter is a token bucket of failed authentications per client
// address. It keeps at most maxLimitedClients addresses; past that it
// forgets one to make room (a refilled one if it finds one), so its memory
// is bounded and no address is ever refused for failures it did not make.
type authLimiter struct {
	mu      sync.Mutex
	rate    float64
	burst   float64
	clients map[string]*bucket
	now     func() time.Time
}

type bucket struct {
	tokens float64
	at     time.Time
}

const maxLimitedClients = 4096

func newAuthLimiter(rate float64, burst int) *authLimiter {
	return &authLimiter{rate: rate, burst: float64(burst), clients: map[string]*bucket{}, now: time.Now}
}

// refill brings b up to date and returns it.
func (l *authLimiter) refill(b *bucket, now time.Time) *bucket {
	if !b.at.IsZero() {
		b.tokens = min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	}
	b.at = now
	return b
}

func (l *authLimiter) bucketOf(client string, now time.Time, create bool) *bucket {
	if b, ok := l.clients[client]; ok {
		return l.refill(b, now)
	}
	if !create {
		return nil
	}
	if len(l.clients) >= maxLimitedClients {
		evict, looked := "", 0
		for k, b := range l.clients { // map order is random: look at a few
			if evict, looked = k, looked+1; l.refill(b, now).tokens >= l.burst || looked == 8 {
				break
			}
		}
		delete(l.clients, evict)
	}
	b := &bucket{tokens: l.burst, at: now}
	l.clients[client] = b
	return b
}

// reserve takes one failed authentication from client's budget before a
// look-up (refund gives it back when the token was good), so concurrent
// look-ups from one address cannot overdraw it. When the budget is empty it
// reports false and when client may try again.
func (l *authLimiter) reserve(client string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucketOf(client, l.now(), true)
	if b.tokens < 1 {
		return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	}
	b.tokens--
	return true, 0
}

// refund returns a reservation: the look-up it was for succeeded.
func (l *authLimiter) refund(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.bucketOf(client, l.now(), false); b != nil {
		b.tokens = min(l.burst, b.tokens+1)
	}
}
