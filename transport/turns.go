package transport

import (
	"time"

	"github.com/multiplane/multiplane/transport/internal/protocol"
)

// Turns: connections that share a path's window take turns in it. While
// the window has room nobody waits; once a connection finds it full, it
// queues on the path, and from then on room goes to the queue's head
// (woken for it), which sends up to turnPackets datagrams and goes to the
// back. Without this the window went to whichever connection an ACK had
// just woken (its poll loop sends what its own ACK let out), so
// connections with data in flight kept the window and the others starved:
// Jain's index 0.35 over 512 connections.

const (
	turnPackets = 4
	// turnTimeout: a head that takes no turn for this long while there is
	// room (its paths changed, it chose another path) goes to the back.
	turnTimeout = time.Millisecond
)

// admit reports whether p's connection may send a datagram on the path
// now, given whether the window has room; when it may not, it queues.
func (sp *sharedPath) admit(p *path, room bool, now time.Time) bool {
	sp.mu.Lock()
	if len(sp.waiting) == 0 {
		if !room {
			sp.enqueue(p, now)
		}
		sp.mu.Unlock()
		return room
	}
	if sp.waiting[0] == p {
		sp.mu.Unlock()
		return room
	}
	sp.enqueue(p, now)
	var wake *Conn
	if room {
		if sp.turn == 0 && now.Sub(sp.turnAt) > turnTimeout {
			sp.rotate(now)
			if sp.waiting[0] == p {
				sp.mu.Unlock()
				return true
			}
		}
		wake = sp.waiting[0].conn
	}
	sp.mu.Unlock()
	if wake != nil {
		wake.wakeSender()
	}
	return false
}

// used counts n bytes p's connection sent on the path in its turn, and
// reports whether connections take turns on the path (it is contended).
func (sp *sharedPath) used(p *path, n, dgram protocol.ByteCount, now time.Time) bool {
	sp.mu.Lock()
	if len(sp.waiting) == 0 || sp.waiting[0] != p {
		contended := len(sp.waiting) > 0
		sp.mu.Unlock()
		return contended
	}
	sp.turn += n
	var wake *Conn
	if sp.turn >= turnPackets*dgram {
		wake = sp.pop(now)
	}
	sp.mu.Unlock()
	if wake != nil {
		wake.wakeSender()
	}
	return true
}

// pass ends p's turn early: its connection has nothing it may send.
func (sp *sharedPath) pass(p *path, now time.Time) {
	sp.mu.Lock()
	var wake *Conn
	if len(sp.waiting) > 0 && sp.waiting[0] == p {
		wake = sp.pop(now)
	}
	sp.mu.Unlock()
	if wake != nil {
		wake.wakeSender()
	}
}

// leave takes p out of the queue: its connection ended or dropped the path.
func (sp *sharedPath) leave(p *path, now time.Time) {
	sp.mu.Lock()
	var wake *Conn
	if p.queued {
		if sp.waiting[0] == p {
			wake = sp.pop(now)
		} else {
			for i, q := range sp.waiting {
				if q == p {
					sp.waiting = append(sp.waiting[:i], sp.waiting[i+1:]...)
					break
				}
			}
			p.queued = false
		}
	}
	sp.mu.Unlock()
	if wake != nil {
		wake.wakeSender()
	}
}

// offer wakes the head of the queue: an ACK made room in the window.
func (sp *sharedPath) offer() {
	sp.mu.Lock()
	var wake *Conn
	if len(sp.waiting) > 0 {
		wake = sp.waiting[0].conn
	}
	sp.mu.Unlock()
	if wake != nil {
		wake.wakeSender()
	}
}

// waitingTurns returns how many connections wait for a turn on the path.
func (sp *sharedPath) waitingTurns() int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return len(sp.waiting)
}

func (sp *sharedPath) enqueue(p *path, now time.Time) {
	if p.queued {
		return
	}
	p.queued = true
	sp.waiting = append(sp.waiting, p)
	if len(sp.waiting) == 1 {
		sp.turn, sp.turnAt = 0, now
	}
}

// pop removes the head and returns the new head's connection (nil if none).
func (sp *sharedPath) pop(now time.Time) *Conn {
	sp.waiting[0].queued = false
	sp.waiting[0] = nil
	sp.waiting = sp.waiting[1:]
	sp.turn, sp.turnAt = 0, now
	if len(sp.waiting) == 0 {
		sp.waiting = nil
		return nil
	}
	return sp.waiting[0].conn
}

// rotate moves the head to the back.
func (sp *sharedPath) rotate(now time.Time) {
	head := sp.waiting[0]
	copy(sp.waiting, sp.waiting[1:])
	sp.waiting[len(sp.waiting)-1] = head
	sp.turn, sp.turnAt = 0, now
}
