package transport

import (
	"fmt"
	"math"
	"time"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// Turns: connections that share a path's window take turns in it. While
// the window has room nobody waits; once a connection finds it full, it
// queues on the path, and from then on room goes to the queue's head
// (woken for it), which sends its quantum and goes to the back: deficit
// round robin with a quantum of turnBytes (at least turnPackets datagrams)
// times the connection's weight (SetWeight). A quantum of a whole bulk
// message spreads completions over the round: with 4-datagram turns every
// one of 4,000 connections finished its 64 KiB message in the same last
// 0.1 s of a 2.6 s round, progress stood at 0 for 2 s at a time, and at
// -D every message was part sent. Without this the window went to whichever connection an ACK had
// just woken (its poll loop sends what its own ACK let out), so
// connections with data in flight kept the window and the others starved:
// Jain's index 0.35 over 512 connections.

const (
	turnPackets = 4
	turnBytes   = 64 << 10
	// MaxWeight bounds SetWeight.
	MaxWeight = 64
	// turnTimeout: a head that takes no turn for this long while there is
	// room (its paths changed, it chose another path) goes to the back.
	turnTimeout = time.Millisecond
)

// admit reports whether p's connection may send a datagram on the path
// now, given whether the window has room and the pacer lets one out; when
// it may not, it queues. The head is woken for its turn only when both
// allow it: when the pacer holds it back, its own pacing deadline wakes it
// (every connection that ran for its ACK woke it otherwise: I1-500, 890,000
// wakes in a run of a sender, of which 13,000 sent).
func (sp *sharedPath) admit(p *path, window, paced bool, now time.Time) bool {
	room := window && paced
	sp.mu.Lock()
	if !window {
		sp.full = true
	}
	head := sp.head(now)
	if head == nil {
		if !room {
			sp.enqueue(p, now)
		}
		sp.unlock(nil)
		return room
	}
	if head == p {
		sp.unlock(nil)
		return room
	}
	sp.enqueue(p, now)
	var wake *Conn
	if room {
		if sp.turn == 0 && now.Sub(sp.turnAt) > turnTimeout {
			sp.rotate(now)
			if sp.head(now) == p {
				sp.unlock(nil)
				return true
			}
		}
		wake = sp.head(now).conn
	}
	sp.unlock(wake)
	return false
}

// used counts n bytes p's connection sent on the path in its turn, and
// reports whether other connections take turns on the path (it is
// contended). A connection alone in the queue (it queued for the pacer)
// is not.
func (sp *sharedPath) used(p *path, n, dgram protocol.ByteCount, now time.Time) bool {
	sp.mu.Lock()
	head := sp.head(now)
	if head != p {
		sp.unlock(nil)
		return head != nil
	}
	contended := sp.live > 1
	sp.turn += n
	var wake *Conn
	if sp.turn >= p.conn.quantum(dgram) {
		wake = sp.pop(now)
	}
	sp.unlock(wake)
	return contended
}

// pass ends p's turn early: its connection has nothing it may send.
func (sp *sharedPath) pass(p *path, now time.Time) {
	sp.mu.Lock()
	var wake *Conn
	if sp.head(now) == p {
		wake = sp.pop(now)
	}
	sp.unlock(wake)
}

// leave takes p out of the queue: its connection ended, dropped the path or
// has nothing left to send. Away from the head this is O(1): the entry
// stays in the queue, stale, until it reaches the head.
func (sp *sharedPath) leave(p *path, now time.Time) {
	sp.mu.Lock()
	var wake *Conn
	if p.queued {
		if sp.head(now) == p {
			wake = sp.pop(now)
		} else {
			p.queued = false
			sp.live--
		}
	}
	sp.unlock(wake)
}

// offer wakes the first connection waiting to resend and the head of the
// queue: an ACK made room in the window. Only when the window held one of
// them back: one paced below its window (a grant) is woken by its pacer,
// and was woken for nothing by each ACK (I1-500: 300,000 wakes in a run
// of a sender, 11,000 of them sending).
func (sp *sharedPath) offer() {
	sp.mu.Lock()
	if !sp.full && len(sp.resends) == 0 {
		sp.mu.Unlock()
		return
	}
	sp.full = false
	var wake, resend *Conn
	if head := sp.head(time.Now()); head != nil {
		wake = head.conn
	}
	if len(sp.resends) > 0 {
		p := sp.resends[0]
		p.resend = false
		resend = p.conn
		sp.resends[0] = nil
		sp.resends = sp.resends[1:]
		if len(sp.resends) == 0 {
			sp.resends = nil
		}
	}
	sp.unlock(wake)
	if resend != nil {
		resend.wakeForTurn()
	}
}

// waitToResend records that p's connection has a retransmission the full
// window holds back. Retransmissions take no turn, so without this nothing
// would wake the connection for the room: 36 of 4,000 connections, their
// last message short of a resend, slept until their keepalive (1.25 s).
func (sp *sharedPath) waitToResend(p *path) {
	sp.mu.Lock()
	if !p.resend {
		p.resend = true
		sp.resends = append(sp.resends, p)
	}
	sp.mu.Unlock()
}

// waitsTurn reports whether p's connection waits in the queue behind
// another: the head's turn, not the pacer, decides when it sends.
func (sp *sharedPath) waitsTurn(p *path, now time.Time) bool {
	sp.mu.Lock()
	waits := p.queued && sp.head(now) != p
	sp.unlock(nil)
	return waits
}

// unlock releases sp.mu and wakes wake, if any, for its turn. (A new head
// is always woken: pop and rotate, which make one, return it; stale
// entries reach the front only through them.)
func (sp *sharedPath) unlock(wake *Conn) {
	sp.mu.Unlock()
	if wake != nil {
		wake.wakeForTurn()
	}
}

// waitingTurns returns how many connections wait for a turn on the path.
func (sp *sharedPath) waitingTurns() int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.live
}

// turnEntry is a place in the queue; it is stale once its path left
// (queued false) or queued again (a newer gen).
type turnEntry struct {
	p   *path
	gen uint32
}

func (e turnEntry) live() bool { return e.p.queued && e.p.queueGen == e.gen }

// head drops stale entries off the front and returns the head (nil if the
// queue is empty). A new head's turn starts now.
func (sp *sharedPath) head(now time.Time) *path {
	dropped := false
	for len(sp.waiting) > 0 && !sp.waiting[0].live() {
		sp.waiting[0] = turnEntry{}
		sp.waiting = sp.waiting[1:]
		dropped = true
	}
	if len(sp.waiting) == 0 {
		sp.waiting = nil
		return nil
	}
	if dropped {
		sp.turn, sp.turnAt = 0, now
	}
	return sp.waiting[0].p
}

func (sp *sharedPath) enqueue(p *path, now time.Time) {
	if p.queued {
		return
	}
	p.queued = true
	p.queueGen++
	sp.live++
	sp.waiting = append(sp.waiting, turnEntry{p, p.queueGen})
	if sp.live == 1 {
		sp.turn, sp.turnAt = 0, now
	}
}

// pop removes the head and returns the new head's connection (nil if none).
func (sp *sharedPath) pop(now time.Time) *Conn {
	sp.waiting[0].p.queued = false
	sp.waiting[0] = turnEntry{}
	sp.waiting = sp.waiting[1:]
	sp.live--
	sp.turn, sp.turnAt = 0, now
	if head := sp.head(now); head != nil {
		return head.conn
	}
	return nil
}

// rotate moves the head to the back.
func (sp *sharedPath) rotate(now time.Time) {
	head := sp.waiting[0]
	sp.waiting[0] = turnEntry{}
	sp.waiting = append(sp.waiting[1:], head)
	sp.turn, sp.turnAt = 0, now
}

// quantum is how many bytes the connection sends in a turn on one path.
func (c *Conn) quantum(dgram protocol.ByteCount) protocol.ByteCount {
	q := float64(max(turnBytes, turnPackets*dgram))
	if w := math.Float64frombits(c.weight.Load()); w > 0 {
		q *= w
	}
	return protocol.ByteCount(q)
}

// SetWeight sets the connection's share of contended paths relative to the
// other connections to the same peer (default 1, up to MaxWeight): its
// turns carry weight times as many bytes, so a connection of weight 2 gets
// twice the bytes of one of weight 1 while both have data.
func (c *Conn) SetWeight(w float64) error {
	if !(w > 0 && w <= MaxWeight) {
		return fmt.Errorf("transport: weight %v: want more than 0, at most %d", w, MaxWeight)
	}
	c.weight.Store(math.Float64bits(w))
	return nil
}
