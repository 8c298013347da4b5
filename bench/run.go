package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
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
	if cfg.CPUProfile != "" {
		stop, err := startCPUProfile(cfg.CPUProfile)
		if err != nil {
			return Result{}, err
		}
		defer stop()
	}
	var r Result
	switch {
	case cfg.Role == RoleServer:
		r, err = runServer(ctx, &cfg, tr, stderr)
	case cfg.Latency:
		r, err = runLatency(ctx, &cfg, tr, stderr)
	default:
		r, err = runClient(ctx, &cfg, tr, stderr)
	}
	if r.Mode != "" {
		if werr := WriteReport(stdout, &cfg, r); werr != nil && err == nil {
			err = werr
		}
	}
	return r, err
}

// lockedWriter serialises writes to w: the progress meter, the
// connections' handlers and the report write from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// startCPUProfile profiles the process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: --cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: --cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func (cfg *Config) result() Result {
	return Result{Mode: cfg.Mode, Role: cfg.Role, Size: cfg.Size, Connections: cfg.Conns, Planes: len(cfg.Bind)}
}

func applyStats(r *Result, st Stats) {
	r.Retransmits = st.Retransmits
	r.PerPlaneBytes = st.PlaneBytes
	r.IO = st.IO
	r.Recovery = st.Recovery
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

// waitForStart waits until at (--start-at), or says that the client is
// late for it.
func waitForStart(ctx context.Context, at time.Time, stderr io.Writer) error {
	if at.IsZero() {
		return nil
	}
	d := time.Until(at)
	if d <= 0 {
		fmt.Fprintf(stderr, "bench: client: connected %v after --start-at: starting now\n", (-d).Round(time.Millisecond))
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func runClient(ctx context.Context, cfg *Config, tr Transport, stderr io.Writer) (Result, error) {
	stderr = &lockedWriter{w: stderr}
	r := cfg.result()
	session := rand.Uint64()
	if err := checkFDs(cfg); err != nil {
		return Result{}, err
	}
	dialStart := time.Now()
	conns, err := dialAll(ctx, cfg, tr)
	if err == nil {
		fmt.Fprintf(stderr, "bench: client: %d connections in %v\n", len(conns), time.Since(dialStart).Round(time.Millisecond))
	}
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	if err != nil {
		return Result{}, err
	}
	ss, hasStats := tr.(StatsSource)
	if hasStats {
		ss.Begin(cfg)
	}
	capper, canCap := tr.(egressCapper)
	if (cfg.EgressCap > 0 || cfg.EgressStep.After > 0) && !canCap {
		return Result{}, fmt.Errorf("%w: --egress-cap: mode %s has no rate control", ErrUsage, cfg.Mode)
	}
	if cfg.EgressCap > 0 {
		if err := capper.SetEgressCap(cfg.EgressCap); err != nil {
			return Result{}, err
		}
		r.RateChanges = append(r.RateChanges, RateChange{AtUnixNs: time.Now().UnixNano(), EgressBps: cfg.EgressCap})
	}
	if err := waitForStart(ctx, cfg.StartAt, stderr); err != nil {
		return Result{}, err
	}
	m := newMeter(cfg, stderr)
	var egress *seriesMeter
	if er, ok := tr.(egressRecorder); ok {
		egress = er.egressMeter()
	}
	start := time.Now()
	m.run(start)
	if egress != nil {
		egress.begin(start)
	}
	stepped := make(chan RateChange, 1)
	if st := cfg.EgressStep; st.After > 0 {
		step := time.AfterFunc(st.After, func() {
			at := time.Now()
			if err := capper.SetEgressCap(st.Bps); err != nil {
				fmt.Fprintf(stderr, "bench: --egress-cap-at: %v\n", err)
				return
			}
			stepped <- RateChange{AtUnixNs: at.UnixNano(), EgressBps: st.Bps}
		})
		defer step.Stop()
	}
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
		ctx, cancelT = context.WithTimeout(ctx, cfg.Duration+resultGrace)
		defer cancelT()
	}

	pattern := newPattern(cfg.Size)
	results := make([]connResult, len(conns))
	var reader, senders sync.WaitGroup
	// Connection 0 also carries the server's progress reports: one reader
	// takes them and hands the result to endRun.
	pc := &progressConn{Conn: conns[0], result: make(chan recvd, 1)}
	reader.Go(func() { pc.read(ctx, m) })
	conns[0] = pc
	finished := make([]atomic.Bool, len(conns))
	abandoned := make([]atomic.Bool, len(conns))
	for i, c := range conns {
		senders.Go(func() {
			defer finished[i].Store(true)
			res := &results[i]
			res.err = runConn(ctx, cfg, c, header{session: session, conn: uint16(i), conns: uint16(len(conns))}, pattern, stopAt, m, res)
			if res.err != nil && abandoned[i].Load() {
				res.err = fmt.Errorf("bench: conn %d: still sending %v after -D: %w", i, sendGrace, res.err)
			}
			if res.err != nil {
				// A failed connection ends; the others carry on.
				_ = c.Close()
			}
		})
	}
	waitSenders(&senders, stopAt, func() {
		for i, c := range conns {
			if !finished[i].Load() {
				abandoned[i].Store(true)
				_ = c.Close()
			}
		}
	})
	endRun(ctx, conns, results, header{session: session, conns: uint16(len(conns))})
	reader.Wait()
	elapsed := time.Since(start)
	peak := m.finish()
	select {
	case rc := <-stepped:
		r.RateChanges = append(r.RateChanges, rc)
	default: // the run ended first
	}
	var errs []error
	r.PerConnectionBytes = make([]int64, len(results))
	for i, res := range results {
		r.Messages += int64(res.verified.messages)
		r.Bytes += int64(res.verified.bytes)
		r.Errors += int64(res.verified.errors)
		r.PerConnectionBytes[i] = int64(res.verified.bytes)
		if res.err != nil {
			r.FailedConnections++
			errs = append(errs, res.err)
		}
	}
	r.JainFairness = jainInts(r.PerConnectionBytes)
	r.Seconds = elapsed.Seconds()
	if r.Seconds > 0 {
		r.GoodputBps = float64(r.Bytes) * 8 / r.Seconds
	}
	r.PeakBps = max(peak, r.GoodputBps)
	if hasStats {
		applyStats(&r, ss.End(cfg))
	}
	if egress != nil {
		r.EgressSeries = egress.result()
	}
	return r, connErrors(errs, len(conns))
}

// resultGrace is how long after -D a client waits for the server's results.
const resultGrace = 60 * time.Second

// sendGrace is how long after -D a connection may still be handing its
// last message to the transport (a starved TCP connection in its
// retransmission backoff): then it is closed and counts as failed, so that
// the run's end message goes out for the others.
var sendGrace = 20 * time.Second

// waitSenders waits for the connections' senders; with -D, abandon (which
// must make them return) is called once sendGrace has passed after it.
func waitSenders(senders *sync.WaitGroup, stopAt time.Time, abandon func()) {
	done := make(chan struct{})
	go func() {
		senders.Wait()
		close(done)
	}()
	if stopAt.IsZero() {
		<-done
		return
	}
	t := time.NewTimer(time.Until(stopAt.Add(sendGrace)))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		abandon()
		<-done
	}
}

// filler is a Conn that builds a message in its own send buffer.
type filler interface {
	SendFill(ctx context.Context, n int, fill func([]byte)) error
}

// withdrawer is a connection that can take back the queued messages it
// has not started sending (package transport's): at -D the client takes
// them back instead of waiting for them, so a run with thousands of
// connections, each with messages queued, ends on time.
type withdrawer interface {
	Withdraw() (msgs int, bytes int64)
}

var msgPool = sync.Pool{New: func() any { return new([]byte) }}

// connResult is what one client connection sent and the server verified.
type connResult struct {
	sent, verified counts
	err            error
}

// runConn sends connection h.conn's messages; endRun sends the run's end.
func runConn(ctx context.Context, cfg *Config, c Conn, h header, pattern []byte, stopAt time.Time, m *meter, res *connResult) error {
	i := h.conn
	// Waiting for room to send ends at -D on connections that take back
	// what they queued: the next message would be taken back anyway.
	sendCtx := ctx
	inner := c
	if p, ok := c.(*progressConn); ok {
		inner = p.Conn
	}
	wd, canWithdraw := inner.(withdrawer)
	if canWithdraw && !stopAt.IsZero() {
		var cancel context.CancelFunc
		sendCtx, cancel = context.WithDeadline(ctx, stopAt)
		defer cancel()
	}
	send := func(seq uint64) error {
		h.seq = seq
		fill := func(msg []byte) { fillData(msg, pattern, h) }
		if f, ok := inner.(filler); ok {
			return f.SendFill(sendCtx, cfg.Size, fill)
		}
		// A buffer only while Send holds it, not one per connection.
		bp := msgPool.Get().(*[]byte)
		defer msgPool.Put(bp)
		if cap(*bp) < cfg.Size {
			*bp = make([]byte, cfg.Size)
		}
		msg := (*bp)[:cfg.Size]
		fill(msg)
		return c.Send(ctx, msg)
	}
	for seq := uint64(0); ; seq++ {
		if (!stopAt.IsZero() && !time.Now().Before(stopAt)) || (stopAt.IsZero() && seq >= uint64(cfg.Iterations)) {
			break
		}
		if err := send(seq); err != nil {
			if sendCtx.Err() != nil && ctx.Err() == nil {
				break // -D came while waiting for room
			}
			return fmt.Errorf("bench: conn %d: send message %d: %w", i, seq, err)
		}
		res.sent.messages++
		res.sent.bytes += uint64(cfg.Size)
	}
	if canWithdraw {
		n, b := wd.Withdraw()
		res.sent.messages -= uint64(n)
		res.sent.bytes -= uint64(b)
	}
	return nil
}

// endRun sends the run's end message (what each connection sent, and
// which failed) on the first live connection, and checks each
// connection's count in the server's result. A connection that fails
// meanwhile is counted failed, and the next one is tried.
func endRun(ctx context.Context, conns []Conn, results []connResult, h header) {
	for e, c := range conns {
		if results[e].err != nil {
			continue
		}
		ends := make([]counts, len(conns))
		for i, res := range results {
			ends[i] = counts{messages: res.sent.messages, bytes: res.sent.bytes}
			if res.err != nil {
				ends[i].errors = failedEnd
			}
		}
		eh := h
		eh.kind, eh.conn = kindEnd, uint16(e)
		if err := c.Send(ctx, appendCountsList(eh, ends)); err != nil {
			results[e].err = fmt.Errorf("bench: conn %d: send end: %w", e, err)
			_ = c.Close()
			continue
		}
		got, err := recvResult(ctx, c, h.session, len(conns))
		if err != nil && ctx.Err() != nil {
			// Out of time: no other connection would do better.
			for i := e; i < len(conns); i++ {
				if results[i].err == nil {
					results[i].err = fmt.Errorf("bench: conn %d: %w", i, err)
				}
			}
			return
		}
		if err != nil {
			results[e].err = fmt.Errorf("bench: conn %d: %w", e, err)
			_ = c.Close()
			continue
		}
		for i := range results {
			results[i].check(i, got[i])
		}
		return
	}
}

// recvResult waits on c for the server's result of session, skipping
// progress reports.
func recvResult(ctx context.Context, c Conn, session uint64, conns int) ([]counts, error) {
	for {
		msg, err := c.Recv(ctx, nil)
		if err != nil {
			return nil, fmt.Errorf("waiting for the server's result: %w", err)
		}
		rh, err := verify(msg)
		if err == nil && rh.kind == kindProgress {
			continue
		}
		if err == nil && (rh.kind != kindResult || rh.session != session) {
			err = fmt.Errorf("%w: unexpected kind %d session %x", ErrCorrupt, rh.kind, rh.session)
		}
		var got []counts
		if err == nil {
			got, err = parseCountsList(msg, conns)
		}
		if err != nil {
			return nil, fmt.Errorf("result: %w", err)
		}
		return got, nil
	}
}

// check compares what the server verified of connection i with what it
// sent; a failed connection keeps its error.
func (res *connResult) check(i int, got counts) {
	if res.err != nil {
		return
	}
	if got.errors == 0 && got.messages < res.sent.messages && got.bytes < res.sent.bytes {
		res.err = fmt.Errorf("bench: conn %d: the server answered with %d of its %d messages verified (the rest had not arrived)",
			i, got.messages, res.sent.messages)
		return
	}
	res.verified = got
	if got.errors != 0 || got.messages != res.sent.messages || got.bytes != res.sent.bytes {
		res.err = fmt.Errorf("%w: conn %d: sent %d messages (%d bytes), server verified %d (%d bytes) with %d errors",
			ErrVerify, i, res.sent.messages, res.sent.bytes, got.messages, got.bytes, got.errors)
	}
}

// progressConn is a client's connection 0: a reader goroutine (read)
// takes the server's progress reports off it into the meter, and Recv
// returns the first other message: the result.
type progressConn struct {
	Conn
	result chan recvd
}

type recvd struct {
	msg []byte
	err error
}

func (p *progressConn) read(ctx context.Context, m *meter) {
	for {
		msg, err := p.Conn.Recv(ctx, nil)
		if err == nil {
			if h, verr := verify(msg); verr == nil && h.kind == kindProgress {
				if c, err := parseCounts(msg); err == nil {
					m.set(c)
				}
				continue
			}
		}
		p.result <- recvd{msg, err}
		return
	}
}

func (p *progressConn) Recv(ctx context.Context, buf []byte) ([]byte, error) {
	select {
	case r := <-p.result:
		return r.msg, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ErrConnFailed is returned when connections of a run failed (the others
// still ran and are reported).
var ErrConnFailed = errors.New("bench: connections failed")

// connErrors summarises the errors of failed connections: the first few
// and how many more, so that 8,192 failures do not print 8,192 lines.
func connErrors(errs []error, conns int) error {
	if len(errs) == 0 {
		return nil
	}
	const show = 3
	var verr error
	for _, e := range errs {
		if errors.Is(e, ErrVerify) {
			verr = ErrVerify
			break
		}
	}
	msg := fmt.Sprintf("%d of %d connections failed", len(errs), conns)
	shown := errs[:min(show, len(errs))]
	more := ""
	if len(errs) > show {
		more = fmt.Sprintf(" (and %d more)", len(errs)-show)
	}
	if verr != nil {
		return fmt.Errorf("%w: %w: %s: %w%s", ErrConnFailed, verr, msg, errors.Join(shown...), more)
	}
	return fmt.Errorf("%w: %s: %w%s", ErrConnFailed, msg, errors.Join(shown...), more)
}

// checkFDs fails early when tcp or mptcp would run out of file
// descriptors (one per connection; multipath and gbn share their sockets).
func checkFDs(cfg *Config) error {
	if cfg.Mode != ModeTCP && cfg.Mode != ModeMPTCP {
		return nil
	}
	if lim := fdLimit(); lim > 0 && uint64(cfg.Conns)+64 > lim {
		return fmt.Errorf("%w: -q %d needs %d file descriptors in mode %s, the limit is %d (raise ulimit -n)",
			ErrUsage, cfg.Conns, cfg.Conns+64, cfg.Mode, lim)
	}
	return nil
}

// dialers is how many connections a client opens at once. (It was one
// while a dialing package transport connection kept its worker busy until
// its INIT-ACK came: with 16 at once, handshakes stalled at -q 512.)
const dialers = 32

// dialAll opens cfg.Conns connections, a few at a time; it fails if any
// cannot connect (the run has not started yet).
func dialAll(ctx context.Context, cfg *Config, tr Transport) ([]Conn, error) {
	conns := make([]Conn, cfg.Conns)
	// The first connection waits for the server to come up; the rest
	// follow in parallel.
	c, err := dial(ctx, cfg, tr)
	if err != nil {
		return conns, err
	}
	conns[0] = c
	errs := make([]error, cfg.Conns)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(dialers, cfg.Conns-1) {
		wg.Go(func() {
			for i := range next {
				conns[i], errs[i] = dial(ctx, cfg, tr)
			}
		})
	}
	for i := 1; i < cfg.Conns; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return conns, fmt.Errorf("bench: conn %d: %w", i, err)
		}
	}
	return conns, nil
}

// progressEvery is how often the server tells each client what it has
// verified of its run.
const progressEvery = 100 * time.Millisecond

// drainGrace bounds how long a server with -D waits, after its window, for
// the client runs in progress to end.
const drainGrace = resultGrace

var errServerTimeout = errors.New("bench: server: --timeout reached")

// runServer serves client runs, any number at once, until cfg.Clients runs
// have completed, or -D after the first message (then it waits for the runs
// in progress), or ctx ends (interrupted). It reports each client and the
// aggregate.
func runServer(ctx context.Context, cfg *Config, tr Transport, stderr io.Writer) (Result, error) {
	stderr = &lockedWriter{w: stderr}
	parent := ctx
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, cfg.Timeout, errServerTimeout)
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
		mu        sync.Mutex
		sessions  = map[uint64]*session{}
		order     []*session // by first message
		completed int
		draining  bool // -D is over: no new sessions
		firstErr  error
		event     = make(chan struct{}, 1)
		firstMsg  = make(chan time.Time, 1)
		started   sync.Once
		wg        sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	notify := func() {
		select {
		case event <- struct{}{}:
		default:
		}
	}
	noteErr := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	handle := func(c Conn) {
		defer c.Close()
		var (
			s     *session
			seen  bitset
			buf   []byte
			conn  int
			early uint64 // errors before the connection named its session
			verrs int
		)
		// reply sends the result once a message settled the run's last
		// connection.
		reply := func(o outcome) {
			if err := s.send(ctx, o); err != nil {
				noteErr(fmt.Errorf("bench: %s: send result: %w", s.addr, err))
			}
		}
		// ended counts the connection in its session once it ended: the
		// client closed it after its result, or it failed before.
		ended := func(err error) {
			if s == nil {
				return
			}
			failed, n, o := s.ended(conn)
			if failed && ctx.Err() == nil {
				noteErr(fmt.Errorf("bench: %s conn %d: connection ended before the end of its run (%d messages verified): %w", s.addr, conn, n, err))
			}
			reply(o)
			mu.Lock()
			s.done++
			if s.complete() {
				completed++
				fmt.Fprintf(stderr, "bench: %s\n", clientLine(s, cfg.ReportGbits))
			}
			mu.Unlock()
			notify()
		}
		rctx := ctx
		for {
			msg, err := c.Recv(rctx, buf)
			if err != nil {
				ended(err)
				return
			}
			buf = msg[:cap(msg)]
			h, verr := verify(msg)
			if verr == nil && s != nil && (h.session != s.id || h.conns != uint16(s.conns) || int(h.conn) != conn) {
				verr = fmt.Errorf("%w: session %x conn %d/%d on connection %d/%d of session %x", ErrCorrupt, h.session, h.conn, h.conns, conn, s.conns, s.id)
			}
			if verr == nil && s == nil && (h.conns == 0 || h.conn >= h.conns) {
				verr = fmt.Errorf("%w: conn %d of %d", ErrCorrupt, h.conn, h.conns)
			}
			if verr != nil {
				if s == nil {
					early++
				} else {
					reply(s.addErrors(conn, 1))
				}
				if verrs++; verrs == 1 {
					err := fmt.Errorf("%w: %s: %w", ErrVerify, c.RemoteAddr(), verr)
					noteErr(err)
					fmt.Fprintf(stderr, "bench: %v\n", err)
				}
				continue
			}
			if s == nil {
				now := time.Now()
				mu.Lock()
				s = sessions[h.session]
				if s == nil && !draining {
					s = newSession(ctx, h.session, c.RemoteAddr(), int(h.conns), now)
					sessions[h.session] = s
					order = append(order, s)
				}
				if s != nil {
					s.seen++
				}
				mu.Unlock()
				if s == nil {
					fmt.Fprintf(stderr, "bench: refusing %s: the server's -D window is over\n", c.RemoteAddr())
					return
				}
				conn, rctx = int(h.conn), s.ctx
				if early > 0 {
					reply(s.addErrors(conn, early))
				}
				if conn == 0 {
					s.sendMu.Lock()
					s.conn0 = c
					s.sendMu.Unlock()
				}
				started.Do(func() {
					firstMsg <- now
					m.run(now)
				})
			}
			switch h.kind {
			case kindData, kindPing:
				if seen.testAndSet(h.seq) {
					reply(s.addErrors(conn, 1))
					noteErr(fmt.Errorf("%w: %s conn %d: message %d delivered twice", ErrVerify, s.addr, h.conn, h.seq))
					continue
				}
				m.add(len(msg))
				s.verified.Add(int64(len(msg)))
				s.msgs.Add(1)
				o := s.add(conn, len(msg))
				if h.kind == kindPing {
					h.kind, h.length = kindPong, uint32(len(msg)-HeaderLen)
					h.put(msg)
					s.sendMu.Lock()
					err := c.Send(ctx, msg)
					s.sendMu.Unlock()
					if err != nil {
						noteErr(fmt.Errorf("bench: %s: send pong: %w", s.addr, err))
						ended(err)
						return
					}
				}
				reply(o)
			case kindEnd:
				want, err := parseCountsList(msg, s.conns)
				if err != nil {
					reply(s.addErrors(conn, 1))
					continue
				}
				reply(s.end(c, h, want))
			default:
				reply(s.addErrors(conn, 1))
			}
		}
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept(ctx)
			if err != nil {
				if ctx.Err() == nil {
					noteErr(fmt.Errorf("bench: accept: %w", err))
					cancel()
				}
				return
			}
			wg.Go(func() { handle(c) })
		}
	})

	wg.Go(func() {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			mu.Lock()
			var live []*session
			for _, s := range order {
				if !s.complete() {
					live = append(live, s)
				}
			}
			mu.Unlock()
			now := time.Now()
			for _, s := range live {
				s.sendProgress(ctx)
				if late, o := s.expire(now); len(late) > 0 {
					noteErr(fmt.Errorf("bench: %s: %d connection(s) (first: conn %d) still short of their data %v after the end message", s.addr, len(late), late[0], endWait))
					if err := s.send(ctx, o); err != nil {
						noteErr(fmt.Errorf("bench: %s: send result: %w", s.addr, err))
					}
				}
			}
		}
	})

	// Serve until the end condition.
	var window, grace <-chan time.Time
	var stopErr error
serve:
	for {
		select {
		case <-event:
		case t0 := <-firstMsg:
			if cfg.Duration > 0 {
				window = time.After(time.Until(t0.Add(cfg.Duration)))
			}
		case <-window:
			mu.Lock()
			draining = true
			mu.Unlock()
			grace = time.After(drainGrace)
		case <-grace:
			break serve
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), errServerTimeout) {
				mu.Lock()
				if completed == 0 {
					stopErr = errServerTimeout
				}
				mu.Unlock()
			} else if parent.Err() == nil {
				mu.Lock()
				stopErr = firstErr // accept failed
				mu.Unlock()
			}
			break serve
		}
		mu.Lock()
		inProgress := len(order) - completed
		stop := (cfg.Clients > 0 && completed >= cfg.Clients) || (draining && inProgress == 0)
		mu.Unlock()
		if stop {
			break
		}
	}
	cancel()
	_ = ln.Close()
	wg.Wait()
	started.Do(func() { m.run(time.Now()) })
	peak := m.finish()

	r := cfg.result()
	r.Connections = 0
	var first, last time.Time
	var goodputs []float64
	for _, s := range order {
		cr, connBytes, sLast := s.report()
		r.Clients = append(r.Clients, cr)
		goodputs = append(goodputs, cr.GoodputBps)
		r.Connections += s.conns
		r.FailedConnections += cr.FailedConnections
		r.Messages += cr.Messages
		r.Bytes += cr.Bytes
		r.Errors += cr.Errors
		r.PerConnectionBytes = append(r.PerConnectionBytes, connBytes...)
		if first.IsZero() || s.first.Before(first) {
			first = s.first
		}
		if sLast.After(last) {
			last = sLast
		}
	}
	r.JainFairness = jainInts(r.PerConnectionBytes)
	if len(order) > 0 {
		j := Jain(goodputs)
		r.JainClients = &j
	}
	if !last.IsZero() {
		r.Seconds = last.Sub(first).Seconds()
	}
	if r.Seconds > 0 {
		r.GoodputBps = float64(r.Bytes) * 8 / r.Seconds
	}
	r.PeakBps = max(peak, r.GoodputBps)
	if m.series != nil {
		r.Series = m.series.result()
	}
	if hasStats {
		applyStats(&r, ss.End(cfg))
	}
	err = stopErr
	if err == nil && firstErr != nil && r.Errors > 0 {
		err = firstErr
	}
	if err == nil && r.Errors > 0 {
		err = fmt.Errorf("%w: %d errors", ErrVerify, r.Errors)
	}
	if err == nil && r.FailedConnections > 0 {
		cause := firstErr
		if cause == nil { // cut off by the server's own stop (--timeout)
			cause = errors.New("they had not finished when the server stopped")
		}
		err = fmt.Errorf("%w: %d of %d connections: %w", ErrConnFailed, r.FailedConnections, r.Connections, cause)
	}
	return r, err
}

func clientLine(s *session, gbits bool) string {
	cr, _, _ := s.report()
	return fmt.Sprintf("client %s (session %s) done: %d connections, %d failed, %d messages, %d bytes in %.3f s, %s %s, %d errors",
		cr.Addr, cr.Session, cr.Connections, cr.FailedConnections, cr.Messages, cr.Bytes, cr.Seconds,
		formatBW(cr.GoodputBps, gbits), bwUnit(gbits), cr.Errors)
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
