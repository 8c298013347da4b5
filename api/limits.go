package api

import (
	"flag"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
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
	MaxStreams        int           // event streams in total
	MaxStreamsPerTok  int           // event streams per token
	FailedAuthRate    float64       // failed authentications per second per client address, sustained
	FailedAuthBurst   int           // failed authentications per client address before the rate applies
	AuditFlush        time.Duration // how often refused anonymous requests are summarised in the audit log
}

// DefaultLimits returns the limits fabricd runs with unless told otherwise.
func DefaultLimits() Limits {
	return Limits{
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 20 * time.Second, WriteTimeout: 60 * time.Second,
		IdleTimeout: 20 * time.Second, MaxHeaderBytes: 64 << 10, MaxConnections: 2048,
		MaxStreams: 256, MaxStreamsPerTok: 8, FailedAuthRate: 5, FailedAuthBurst: 20, AuditFlush: 10 * time.Second,
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
	fs.IntVar(&l.MaxStreams, "max-event-streams", l.MaxStreams, "concurrent /api/v1/stream clients in total (more get 429)")
	fs.IntVar(&l.MaxStreamsPerTok, "max-event-streams-per-token", l.MaxStreamsPerTok, "concurrent /api/v1/stream clients per token (more get 429)")
	fs.Float64Var(&l.FailedAuthRate, "failed-auth-rate", l.FailedAuthRate, "failed authentications per second a client address may sustain before it gets 429")
	fs.IntVar(&l.FailedAuthBurst, "failed-auth-burst", l.FailedAuthBurst, "failed authentications a client address may make at once")
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
	for _, p := range []struct{ v, def *int }{{&l.MaxHeaderBytes, &d.MaxHeaderBytes}, {&l.MaxConnections, &d.MaxConnections},
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

// LimitListener closes connections beyond the configured maximum as soon
// as they are accepted, so a flood of idle connections cannot exhaust file
// descriptors or memory.
func (s *Server) LimitListener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, max: int64(s.limits.MaxConnections), refused: s.metrics.refusedConns}
}

type limitListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused interface{ Inc() }
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refused.Inc()
			c.Close()
			continue
		}
		return &countedConn{Conn: c, l: l}, nil
	}
}

type countedConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

// streamSlots counts event streams in total and per token.
type streamSlots struct {
	mu       sync.Mutex
	total    int
	perToken map[int64]int
	max, per int
}

func newStreamSlots(max, per int) *streamSlots {
	return &streamSlots{perToken: map[int64]int{}, max: max, per: per}
}

// acquire takes a slot for token; it says which limit refused it, or "".
func (s *streamSlots) acquire(token int64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.total >= s.max:
		return "fabricd serves at most " + strconv.Itoa(s.max) + " event streams at once"
	case s.perToken[token] >= s.per:
		return "this token has " + strconv.Itoa(s.per) + " event streams open already, the most one token may have"
	}
	s.total++
	s.perToken[token]++
	return ""
}

func (s *streamSlots) release(token int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.perToken[token]--; s.perToken[token] <= 0 {
		delete(s.perToken, token)
	}
}

// authLimiter is a token bucket of failed authentications per client
// address. It keeps at most maxClients addresses; past that, addresses
// share one bucket, so its memory is bounded whatever the sources.
type authLimiter struct {
	mu      sync.Mutex
	rate    float64
	burst   float64
	clients map[string]*bucket
	shared  bucket
	now     func() time.Time
}

type bucket struct {
	tokens float64
	at     time.Time
}

const maxLimitedClients = 4096

func newAuthLimiter(rate float64, burst int) *authLimiter {
	return &authLimiter{rate: rate, burst: float64(burst), clients: map[string]*bucket{}, now: time.Now,
		shared: bucket{tokens: float64(burst)}}
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
		for k, b := range l.clients { // forget addresses whose bucket is full again
			if l.refill(b, now).tokens >= l.burst {
				delete(l.clients, k)
			}
		}
	}
	if len(l.clients) >= maxLimitedClients {
		return l.refill(&l.shared, now)
	}
	b := &bucket{tokens: l.burst, at: now}
	l.clients[client] = b
	return b
}

// blocked reports whether client has used up its failed authentications,
// and when it may try again.
func (l *authLimiter) blocked(client string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucketOf(client, l.now(), false)
	if b == nil && len(l.clients) >= maxLimitedClients {
		b = l.refill(&l.shared, l.now())
	}
	if b == nil || b.tokens >= 1 {
		return false, 0
	}
	return true, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

// failed counts one failed authentication of client.
func (l *authLimiter) failed(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucketOf(client, l.now(), true)
	b.tokens = max(0, b.tokens-1)
}
