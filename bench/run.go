package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"
)

// ErrVerify is returned when a message or a count did not check out.
var ErrVerify = errors.New("bench: verification failed")

// Run runs one benchmark in cfg.Role, printing progress to stderr and the
// report to stdout. A verification failure returns an error wrapping
// ErrVerify (and still prints what was measured).
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	tr, err := transportFor(cfg.Mode)
	if err != nil {
		return Result{}, err
	}
	if cl, ok := tr.(io.Closer); ok {
		defer cl.Close()
	}
	var r Result
	if cfg.Role == RoleServer {
		r, err = runServer(ctx, &cfg, tr, stderr)
	} else {
		r, err = runClient(ctx, &cfg, tr, stderr)
	}
	if r.Mode != "" {
		if werr := WriteReport(stdout, &cfg, r); werr != nil && err == nil {
			err = werr
		}
	}
	return r, err
}

func (cfg *Config) result() Result {
	return Result{Mode: cfg.Mode, Role: cfg.Role, Size: cfg.Size, Connections: cfg.Conns, Planes: len(cfg.Bind)}
}

func applyStats(r *Result, st Stats) {
	r.Retransmits = st.Retransmits
	r.PerPlaneBytes = st.PlaneBytes
}

// dial connects with retries until cfg.ConnectTimeout: the server may
// still be starting.
func dial(ctx context.Context, cfg *Config, tr Transport) (Conn, error) {
	deadline := time.Now().Add(cfg.ConnectTimeout)
	backoff := 10 * time.Millisecond
	for {
		c, err := tr.Dial(ctx, cfg)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, ErrUsage) || time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("bench: connect: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff): // retry interval while the server starts
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

func runClient(ctx context.Context, cfg *Config, tr Transport, stderr io.Writer) (Result, error) {
	r := cfg.result()
	session := rand.Uint64()
	conns := make([]Conn, 0, cfg.Conns)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range cfg.Conns {
		c, err := dial(ctx, cfg, tr)
		if err != nil {
			return Result{}, err
		}
		conns = append(conns, c)
	}
	ss, hasStats := tr.(StatsSource)
	if hasStats {
		ss.Begin(cfg)
	}
	m := newMeter(cfg, stderr)
	start := time.Now()
	m.run(start)
	stopAt := time.Time{}
	if cfg.Duration > 0 {
		stopAt = start.Add(cfg.Duration)
	}
	// With -D, results must come back within a grace period after sending
	// stops; with -n the run takes as long as it takes.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.Duration > 0 {
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeout(ctx, cfg.Duration+60*time.Second)
		defer cancelT()
	}

	pattern := newPattern(cfg.Size)
	type connResult struct {
		sent, verified counts
		err            error
	}
	results := make([]connResult, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			res := &results[i]
			h := header{session: session, conn: uint16(i), conns: uint16(len(conns))}
			msg := make([]byte, cfg.Size)
			for seq := uint64(0); ; seq++ {
				if (!stopAt.IsZero() && !time.Now().Before(stopAt)) || (stopAt.IsZero() && seq >= uint64(cfg.Iterations)) {
					break
				}
				h.seq = seq
				fillData(msg, pattern, h)
				if err := c.Send(ctx, msg); err != nil {
					res.err = fmt.Errorf("bench: conn %d: send message %d: %w", i, seq, err)
					cancel()
					return
				}
				res.sent.messages++
				res.sent.bytes += uint64(cfg.Size)
				m.add(cfg.Size)
			}
			end := h
			end.kind, end.seq = kindEnd, res.sent.messages
			if err := c.Send(ctx, appendCounts(end, res.sent)); err != nil {
				res.err = fmt.Errorf("bench: conn %d: send end: %w", i, err)
				return
			}
			msg, err := c.Recv(ctx, nil)
			if err != nil {
				res.err = fmt.Errorf("bench: conn %d: waiting for the server's result: %w", i, err)
				return
			}
			rh, err := verify(msg)
			if err == nil && (rh.kind != kindResult || rh.session != session) {
				err = fmt.Errorf("%w: unexpected kind %d session %x", ErrCorrupt, rh.kind, rh.session)
			}
			if err == nil {
				res.verified, err = parseCounts(msg)
			}
			if err != nil {
				res.err = fmt.Errorf("bench: conn %d: result: %w", i, err)
				return
			}
			if res.verified.errors != 0 || res.verified.messages != res.sent.messages || res.verified.bytes != res.sent.bytes {
				res.err = fmt.Errorf("%w: conn %d: sent %d messages (%d bytes), server verified %d (%d bytes) with %d errors",
					ErrVerify, i, res.sent.messages, res.sent.bytes, res.verified.messages, res.verified.bytes, res.verified.errors)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	peak := m.finish()
	var errs []error
	for _, res := range results {
		r.Messages += int64(res.verified.messages)
		r.Bytes += int64(res.verified.bytes)
		r.Errors += int64(res.verified.errors)
		if res.err != nil {
			errs = append(errs, res.err)
		}
	}
	r.Seconds = elapsed.Seconds()
	if r.Seconds > 0 {
		r.GoodputBps = float64(r.Bytes) * 8 / r.Seconds
	}
	r.PeakBps = max(peak, r.GoodputBps)
	if hasStats {
		applyStats(&r, ss.End(cfg))
	}
	return r, errors.Join(errs...)
}

// session is one client run as the server sees it.
type session struct {
	id          uint64
	conns       int
	done        int
	first, last time.Time
	c           counts
}

func runServer(ctx context.Context, cfg *Config, tr Transport, stderr io.Writer) (Result, error) {
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	ln, err := tr.Listen(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer ln.Close()
	fmt.Fprintf(stderr, "bench: server listening, mode %s, port %d\n", cfg.Mode, cfg.Port)
	ss, hasStats := tr.(StatsSource)
	if hasStats {
		ss.Begin(cfg)
	}
	m := newMeter(cfg, stderr)

	var (
		mu       sync.Mutex
		sessions = map[uint64]*session{}
		finished = make(chan *session, 1)
		failed   = make(chan error, 1)
		started  sync.Once
		wg       sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := func(err error) {
		select {
		case failed <- err:
		default:
		}
	}
	handle := func(c Conn) {
		defer c.Close()
		var (
			s        *session
			seen     bitset
			got      counts
			end      *counts
			endH     header
			buf      []byte
			replied  bool
			firstErr error
		)
		reply := func() {
			res := got
			res.errors = got.errors
			if end != nil && (got.messages != end.messages || got.bytes != end.bytes) {
				res.errors++
			}
			rh := endH
			rh.kind = kindResult
			if err := c.Send(ctx, appendCounts(rh, res)); err != nil {
				fail(fmt.Errorf("bench: send result: %w", err))
			}
			replied = true
			mu.Lock()
			s.c.messages += got.messages
			s.c.bytes += got.bytes
			s.c.errors += res.errors
			s.last = time.Now()
			mu.Unlock()
			if firstErr != nil {
				fail(firstErr)
			}
		}
		// done counts the connection in its session once the client has
		// its result: the run ends (and the transport closes) only then.
		done := func() {
			mu.Lock()
			s.done++
			complete := s.done == s.conns
			mu.Unlock()
			if complete {
				select {
				case finished <- s:
				default:
				}
			}
		}
		for !replied {
			msg, err := c.Recv(ctx, buf)
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, io.EOF) {
					fail(fmt.Errorf("bench: receive: %w", err))
				} else if ctx.Err() == nil && s != nil {
					fail(fmt.Errorf("%w: connection closed before the end of the run (%d messages verified)", ErrVerify, got.messages))
				}
				return
			}
			buf = msg[:cap(msg)]
			h, verr := verify(msg)
			if verr == nil && s != nil && (h.session != s.id || h.conns != uint16(s.conns)) {
				verr = fmt.Errorf("%w: session %x conns %d on a connection of session %x", ErrCorrupt, h.session, h.conns, s.id)
			}
			if verr != nil {
				got.errors++
				if firstErr == nil {
					firstErr = fmt.Errorf("%w: %w", ErrVerify, verr)
					fmt.Fprintf(stderr, "bench: %v\n", firstErr)
				}
				continue
			}
			if s == nil {
				mu.Lock()
				s = sessions[h.session]
				if s == nil {
					s = &session{id: h.session, conns: int(h.conns), first: time.Now()}
					sessions[h.session] = s
				}
				mu.Unlock()
				started.Do(func() { m.run(s.first) })
			}
			switch h.kind {
			case kindData:
				if seen.testAndSet(h.seq) {
					got.errors++
					if firstErr == nil {
						firstErr = fmt.Errorf("%w: conn %d: message %d delivered twice", ErrVerify, h.conn, h.seq)
					}
					continue
				}
				got.messages++
				got.bytes += uint64(len(msg))
				m.add(len(msg))
			case kindEnd:
				e, err := parseCounts(msg)
				if err != nil {
					got.errors++
					continue
				}
				end, endH = &e, h
			default:
				got.errors++
			}
			if end != nil && got.messages+got.errors >= end.messages {
				reply()
			}
		}
		// Wait for the client to close, so the result is not cut off.
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		_, _ = c.Recv(wctx, buf)
		wcancel()
		done()
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept(ctx)
			if err != nil {
				if ctx.Err() == nil {
					fail(fmt.Errorf("bench: accept: %w", err))
				}
				return
			}
			wg.Go(func() { handle(c) })
		}
	})
	var s *session
	var runErr error
	select {
	case s = <-finished:
		// A verification error of the same run is reported with it.
		select {
		case runErr = <-failed:
		default:
		}
	case runErr = <-failed:
	case <-ctx.Done():
		runErr = fmt.Errorf("bench: server: %w", context.Cause(ctx))
	}
	cancel()
	_ = ln.Close()
	wg.Wait()
	r := cfg.result()
	if s == nil {
		started.Do(func() { m.run(time.Now()) })
		m.finish()
		return r, runErr
	}
	peak := m.finish()
	r.Connections = s.conns
	r.Messages, r.Bytes, r.Errors = int64(s.c.messages), int64(s.c.bytes), int64(s.c.errors)
	r.Seconds = s.last.Sub(s.first).Seconds()
	if r.Seconds > 0 {
		r.GoodputBps = float64(r.Bytes) * 8 / r.Seconds
	}
	r.PeakBps = max(peak, r.GoodputBps)
	if hasStats {
		applyStats(&r, ss.End(cfg))
	}
	if runErr == nil && r.Errors > 0 {
		runErr = fmt.Errorf("%w: %d errors", ErrVerify, r.Errors)
	}
	return r, runErr
}

// bitset records which sequence numbers arrived.
type bitset []uint64

func (b *bitset) testAndSet(i uint64) bool {
	w := int(i / 64)
	if w >= len(*b) {
		*b = append(*b, make([]uint64, w+1-len(*b)+len(*b)/2)...)
	}
	bit := uint64(1) << (i % 64)
	was := (*b)[w]&bit != 0
	(*b)[w] |= bit
	return was
}
