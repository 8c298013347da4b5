package transport

import (
	"net/netip"
	"time"
)

// PeerPlane is what the transport knows of a peer on one local plane.
// Heard proves the peer's port on the plane sends and this endpoint's
// receives; Acked proves the reverse direction.
type PeerPlane struct {
	Plane int
	// Addr is the peer's address on the plane (not valid: not known, as
	// for an accepted connection whose INIT did not cross the plane).
	Addr netip.AddrPort
	// Heard is when a datagram from the peer last arrived on the plane;
	// Acked when data sent on the plane was last acknowledged (zero:
	// never).
	Heard, Acked time.Time
	// Unacked is when the oldest data sent on the plane and not yet
	// acknowledged left (zero: nothing waits); Sent when data last left on
	// it. Data still sent long after Unacked, with the peer heard
	// elsewhere: the plane does not carry this endpoint's data.
	Unacked, Sent time.Time
	// SmoothedRTT is the smallest over the peer's paths on the plane (0:
	// no sample).
	SmoothedRTT time.Duration
}

// PeerStats are a peer's liveness and per-plane evidence.
type PeerStats struct {
	// Heard is when the peer was last heard, on any plane.
	Heard  time.Time
	Planes []PeerPlane
}

// Peers returns what the transport knows of each peer it has connections
// to. It reads atomics and the peers' shared paths, not the connections,
// so it is cheap at thousands of connections.
func (t *Transport) Peers() []PeerStats {
	t.mu.RLock()
	var roots []*peer
	seen := map[*peer]bool{}
	addrs := map[*peer][]peerAddr{}
	for _, p := range t.peers {
		r := p.root()
		if !seen[r] {
			seen[r] = true
			roots = append(roots, r)
			addrs[r] = append([]peerAddr(nil), r.addrs...)
		}
	}
	t.mu.RUnlock()
	at := func(d int64) time.Time {
		if d == 0 {
			return time.Time{}
		}
		return t.epoch.Add(time.Duration(d))
	}
	out := make([]PeerStats, 0, len(roots))
	for _, r := range roots {
		ps := PeerStats{Heard: at(r.heard.Load()), Planes: make([]PeerPlane, len(r.planes))}
		for i := range r.planes {
			pp := &r.planes[i]
			acked, unacked := pp.acked.Load(), pp.unacked.Load()
			if unacked <= acked {
				unacked = 0
			}
			ps.Planes[i] = PeerPlane{Plane: i, Heard: at(pp.heard.Load()), Acked: at(acked), Unacked: at(unacked), Sent: at(pp.sent.Load())}
		}
		for _, a := range addrs[r] {
			if a.plane < len(ps.Planes) && !ps.Planes[a.plane].Addr.IsValid() {
				ps.Planes[a.plane].Addr = a.addr
			}
		}
		r.pathsMu.Lock()
		for k, sp := range r.paths {
			pl := int(k.id) >> 8
			if pl >= len(ps.Planes) {
				continue
			}
			if s := sp.rtt.Smoothed(); s > 0 && (ps.Planes[pl].SmoothedRTT == 0 || s < ps.Planes[pl].SmoothedRTT) {
				ps.Planes[pl].SmoothedRTT = s
			}
		}
		r.pathsMu.Unlock()
		out = append(out, ps)
	}
	return out
}
