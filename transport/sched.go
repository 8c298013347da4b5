package transport

import (
	"container/heap"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/multiplane/multiplane/transport/internal/ioengine"
)

// The connections' send work (timers, new messages, what pacing lets out)
// runs on a few scheduler goroutines per transport, one per CPU, not on a
// goroutine and a timer per connection: a connection is either woken (in
// its worker's run queue, served in turn, up to maxPerRound packets each),
// waiting for its next deadline (in the worker's heap of deadlines), or
// idle. So the goroutines and timers of a transport are constant in the
// number of its connections, and connections with data take turns.
//
// A worker sends the batches of its connections' turns coalesced per port
// (coalesce.go): they leave when workerFlushDatagrams are held, when the
// run queue is empty, or before the same connection runs again. A
// connection's txMu stays locked while its batches are held, so what it
// builds later (in the poll loop too) leaves after them.

// workerFlushDatagrams held in a worker's partial batches make it send
// them: enough for several datagrams per send call on each of 4-8 ports.
const workerFlushDatagrams = 64

// worker runs the send work of the connections assigned to it.
type worker struct {
	mu      sync.Mutex
	ready   fifo[*Conn] // woken, in turn
	urgent  fifo[*Conn] // woken for a turn in a shared window: run first
	waiting deadlines   // by next deadline
	kick    chan struct{}

	// worker goroutine only
	tx    coalescer
	stage []outBatch
	held  []*Conn // whose batches tx holds, their txMu locked
}

// flush sends the batches the worker holds and lets their connections
// send again.
func (w *worker) flush() {
	w.tx.flush()
	for i, c := range w.held {
		c.sched.staged = false
		c.txMu.Unlock()
		w.held[i] = nil
	}
	w.held = w.held[:0]
}

// schedState is a connection's place in its worker, guarded by worker.mu
// (but w, set once when it is scheduled).
type schedState struct {
	w      atomic.Pointer[worker]
	queued bool      // to run: in w.ready or w.urgent (entries of a run one are stale)
	urgent bool      // in w.urgent
	at     time.Time // deadline in w.waiting (when index >= 0)
	index  int       // in w.waiting, -1 when not there
	woken  bool      // woken since it last ran (counted as a wake)
	ended  bool      // the connection ended: never run again
	staged bool      // its batches are in w.held (worker goroutine only)
}

func (t *Transport) startWorkers() {
	n := max(1, runtime.GOMAXPROCS(0))
	t.workers = make([]*worker, n)
	for i := range t.workers {
		w := &worker{kick: make(chan struct{}, 1), tx: coalescer{t: t, msg: "send failed"}}
		t.workers[i] = w
		t.wg.Add(1)
		go t.runWorker(w)
	}
}

// schedule gives c to a worker and runs it once.
func (t *Transport) schedule(c *Conn) {
	c.wg.Add(1) // done when the worker sees the connection ended
	w := t.workers[int(c.id)%len(t.workers)]
	w.mu.Lock()
	c.sched.index = -1
	w.mu.Unlock()
	c.sched.w.Store(w)
	c.wakeSender()
}

// wake has the worker goroutine look at its queues.
func (w *worker) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// next takes the next connection to run, those woken for a turn first,
// skipping stale entries; w.mu held.
func (w *worker) next() *Conn {
	if c := popLive(&w.urgent, func(c *Conn) bool { return c.sched.urgent }); c != nil {
		return c
	}
	return popLive(&w.ready, func(c *Conn) bool { return c.sched.queued })
}

// popLive pops entries off the front of q until one is live.
func popLive(q *fifo[*Conn], live func(*Conn) bool) *Conn {
	for q.len() > 0 {
		if c := q.pop(); live(c) {
			return c
		}
	}
	return nil
}

// wakeForTurn has the connection's send work run before the other work
// waiting: it is the head of a shared window's turns, which stays idle
// until it sends. Behind the ready queue of 4,000 connections the window
// stood empty while thousands waited for their turns.
func (c *Conn) wakeForTurn() {
	w := c.sched.w.Load()
	if w == nil {
		return
	}
	w.mu.Lock()
	c.sched.woken = true
	if !c.sched.urgent && !c.sched.ended {
		c.sched.queued, c.sched.urgent = true, true
		w.urgent.push(c)
	}
	w.mu.Unlock()
	w.wake()
}

// wakeSender has the connection's send work run soon.
func (c *Conn) wakeSender() {
	w := c.sched.w.Load()
	if w == nil { // not scheduled yet: it runs when it is
		return
	}
	w.mu.Lock()
	c.sched.woken = true
	if !c.sched.queued && !c.sched.ended {
		c.sched.queued = true
		w.ready.push(c)
	}
	w.mu.Unlock()
	w.wake()
}

func (t *Transport) runWorker(w *worker) {
	defer t.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	defer w.flush()
	for {
		now := t.cfg.clock.Now()
		w.mu.Lock()
		for len(w.waiting) > 0 && !w.waiting[0].sched.at.After(now) {
			c := heap.Pop(&w.waiting).(*Conn)
			if !c.sched.queued && !c.sched.ended {
				c.sched.queued = true
				w.ready.push(c)
			}
		}
		if c := w.next(); c != nil {
			c.sched.queued, c.sched.urgent = false, false
			if c.sched.ended { // woken while its last turn ended it
				w.mu.Unlock()
				continue
			}
			woken := c.sched.woken
			c.sched.woken = false
			w.mu.Unlock()
			if c.sched.staged {
				w.flush()
			}
			more, next, done, staged := c.sendWork(woken, w.stage[:0])
			if len(staged) > 0 {
				for _, ob := range staged {
					w.tx.add(ob)
				}
				clear(staged)
				w.stage = staged[:0]
				c.sched.staged = true
				w.held = append(w.held, c)
				if w.tx.n >= workerFlushDatagrams {
					w.flush()
				}
			}
			w.mu.Lock()
			switch {
			case done:
				if c.sched.index >= 0 {
					heap.Remove(&w.waiting, c.sched.index)
				}
				c.sched.ended = true
				w.mu.Unlock()
				c.wg.Done()
				continue
			case more:
				if !c.sched.queued {
					c.sched.queued = true
					w.ready.push(c)
				}
			case !next.IsZero():
				c.sched.at = next
				if c.sched.index >= 0 {
					heap.Fix(&w.waiting, c.sched.index)
				} else {
					heap.Push(&w.waiting, c)
				}
			case c.sched.index >= 0:
				heap.Remove(&w.waiting, c.sched.index)
			}
			w.mu.Unlock()
			continue
		}
		if len(w.held) > 0 {
			w.mu.Unlock()
			w.flush()
			continue
		}
		d := time.Duration(1<<62 - 1)
		if len(w.waiting) > 0 {
			d = w.waiting[0].sched.at.Sub(now)
		}
		w.mu.Unlock()
		if d < spinThreshold && (t.cfg.PollMode == PollBusy || (t.cfg.PollMode == PollAdaptive && ioengine.TrySpin())) {
			runtime.Gosched()
			if t.cfg.PollMode == PollAdaptive {
				ioengine.DoneSpin()
			}
			continue
		}
		timer.Reset(d)
		select {
		case <-w.kick:
		case <-timer.C:
		case <-t.ctx.Done():
			return
		}
	}
}

// deadlines is a min-heap of connections by their next deadline.
type deadlines []*Conn

func (h deadlines) Len() int           { return len(h) }
func (h deadlines) Less(i, j int) bool { return h[i].sched.at.Before(h[j].sched.at) }
func (h deadlines) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].sched.index, h[j].sched.index = i, j
}
func (h *deadlines) Push(x any) {
	c := x.(*Conn)
	c.sched.index = len(*h)
	*h = append(*h, c)
}
func (h *deadlines) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	c.sched.index = -1
	return c
}
