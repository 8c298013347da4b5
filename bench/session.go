package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// session is one client run as the server sees it.
type session struct {
	id    uint64
	addr  string // the client, as its first connection names it
	conns int
	first time.Time
	// ctx is what the run's connections wait in: cancelled lingerAfterResult
	// after the result went out, if the client has not closed them by then.
	ctx    context.Context
	cancel context.CancelFunc

	// Under the server's lock: connections that sent a message, and of
	// those, the ones that ended.
	seen, done int

	verified atomic.Int64 // bytes, for progress reports
	msgs     atomic.Int64
	resulted atomic.Bool // the result went out: progress stops, and a connection that ends now ends normally

	mu       sync.Mutex
	got      []counts // verified, by connection index
	failed   []bool   // ended before the result, or failed by the client's end message
	want     []counts // the client's end message; nil before it came
	settled  []bool   // the connection needs nothing more: its messages arrived, or it failed
	pending  int      // connections not settled
	mismatch []bool   // got differed from want when the result went out
	endConn  Conn     // the connection the end message came on
	endH     header
	endAt    time.Time // the end message came
	last     time.Time // the result went out, or a connection failed

	// conn0 carries progress reports; sendMu orders them with the result.
	sendMu sync.Mutex
	conn0  Conn
}

// endWait is how long the server waits, after a run's end message, for
// the data of its slowest connections: then it answers with what arrived,
// and those connections count as failed (late), not the whole run. The
// end goes out at most sendGrace after -D, and the client waits for the
// result until resultGrace after it.
var endWait = resultGrace / 2

// lingerAfterResult is how long a connection waits for the client to close
// it once the result went out (so the result is not cut off).
const lingerAfterResult = 30 * time.Second

func newSession(ctx context.Context, id uint64, addr string, conns int, first time.Time) *session {
	s := &session{id: id, addr: addr, conns: conns, first: first,
		got: make([]counts, conns), failed: make([]bool, conns), settled: make([]bool, conns), mismatch: make([]bool, conns)}
	s.ctx, s.cancel = context.WithCancel(ctx)
	return s
}

// outcome is a result message to send, if msg is not nil.
type outcome struct {
	msg []byte
	to  Conn
}

// add counts a verified message of conn, unless the result went out (a
// late connection's data counts as it was then).
func (s *session) add(conn, n int) outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resulted.Load() {
		return outcome{}
	}
	s.got[conn].messages++
	s.got[conn].bytes += uint64(n)
	return s.settle(conn)
}

// addErrors counts n errors on conn (a message that failed verification).
func (s *session) addErrors(conn int, n uint64) outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got[conn].errors += n
	return s.settle(conn)
}

// settle marks conn settled once its data is all in; the last one makes
// the result. s.mu held.
func (s *session) settle(conn int) outcome {
	if s.want == nil || s.settled[conn] {
		return outcome{}
	}
	g := s.got[conn]
	if !s.failed[conn] && g.messages+g.errors < s.want[conn].messages {
		return outcome{}
	}
	s.settled[conn] = true
	s.pending--
	if s.pending > 0 {
		return outcome{}
	}
	return s.result()
}

// end takes the client's end message, which came on c.
func (s *session) end(c Conn, h header, want []counts) outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want, s.endConn, s.endH, s.endAt = want, c, h, time.Now()
	s.pending = 0
	for i, w := range want {
		if w.errors == failedEnd {
			s.failed[i] = true
		}
		g := s.got[i]
		s.settled[i] = s.failed[i] || g.messages+g.errors >= w.messages
		if !s.settled[i] {
			s.pending++
		}
	}
	if s.pending > 0 {
		return outcome{}
	}
	return s.result()
}

// expire answers a run whose end message came endWait ago or more, with
// connections still short of their data: those are late (failed). It
// returns the connections that were late.
func (s *session) expire(now time.Time) (late []int, o outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.want == nil || s.pending == 0 || s.resulted.Load() || now.Sub(s.endAt) < endWait {
		return nil, outcome{}
	}
	for i := range s.settled {
		if !s.settled[i] {
			s.settled[i], s.failed[i] = true, true
			late = append(late, i)
		}
	}
	s.pending = 0
	return late, s.result()
}

// result builds the result message; s.mu held. A connection whose count
// differs from what the client sent has an error more; a late one has
// what arrived.
func (s *session) result() outcome {
	res := make([]counts, s.conns)
	for i, g := range s.got {
		w := s.want[i]
		s.mismatch[i] = !s.failed[i] && (g.messages != w.messages || g.bytes != w.bytes)
		res[i] = g
		if s.mismatch[i] {
			res[i].errors++
		}
	}
	rh := s.endH
	rh.kind, rh.seq = kindResult, 0
	s.last = time.Now()
	s.resulted.Store(true)
	time.AfterFunc(lingerAfterResult, s.cancel)
	return outcome{appendCountsList(rh, res), s.endConn}
}

// ended records that conn's connection ended; it failed if the result had
// not gone out yet. verified is its count of messages.
func (s *session) ended(conn int) (failed bool, verified uint64, o outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resulted.Load() {
		return false, s.got[conn].messages, outcome{}
	}
	s.failed[conn] = true
	s.last = time.Now()
	return true, s.got[conn].messages, s.settle(conn)
}

// send sends a result message.
func (s *session) send(ctx context.Context, o outcome) error {
	if o.msg == nil {
		return nil
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return o.to.Send(ctx, o.msg)
}

// sendProgress sends the run's verified counts on connection 0, unless
// the result went out already.
func (s *session) sendProgress(ctx context.Context) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.conn0 == nil || s.resulted.Load() {
		return
	}
	h := header{kind: kindProgress, session: s.id, conns: uint16(s.conns)}
	c := counts{messages: uint64(s.msgs.Load()), bytes: uint64(s.verified.Load())}
	_ = s.conn0.Send(ctx, appendCounts(h, c)) // a failed connection is the handler's to report
}

// complete reports whether the run is over: its result went out and every
// connection that joined it ended, or every connection joined and failed.
// Under the server's lock.
func (s *session) complete() bool {
	return s.done >= s.seen && (s.resulted.Load() || s.seen == s.conns)
}

// report is the session's line of the server's report, its verified
// bytes by connection and when it ended. Under the server's lock, or once
// every connection's handler returned.
func (s *session) report() (cr ClientResult, connBytes []int64, last time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	connBytes = make([]int64, s.conns)
	for i, g := range s.got {
		connBytes[i] = int64(g.bytes)
	}
	cr = ClientResult{
		Addr: s.addr, Session: fmt.Sprintf("%016x", s.id), Connections: s.conns,
		Complete: s.complete(), JainFairness: jainInts(connBytes),
	}
	for i, g := range s.got {
		cr.Messages += int64(g.messages)
		cr.Bytes += int64(g.bytes)
		cr.Errors += int64(g.errors)
		if s.mismatch[i] {
			cr.Errors++
		}
		if s.failed[i] {
			cr.FailedConnections++
		}
	}
	if !s.last.IsZero() {
		cr.Seconds = s.last.Sub(s.first).Seconds()
	}
	if cr.Seconds > 0 {
		cr.GoodputBps = float64(cr.Bytes) * 8 / cr.Seconds
	}
	return cr, connBytes, s.last
}
