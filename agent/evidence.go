package agent

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/transport"
)

// Evidence judges, from what the transport saw of each peer on each plane,
// whether the plane carries this endpoint's traffic (docs/etcd-layout.md,
// "Endpoint evidence"). fabricd uses it to judge the links of a switch
// whose telemetry is unreachable.
type Evidence struct {
	// Window: a peer that acknowledged data on a plane, or was heard on
	// it, within Window is reachable there; a peer not heard on any plane
	// within Window is left out (idle or gone: no evidence either way).
	Window time.Duration
	// WaitLimit: a peer is unreachable on a plane when data is still sent
	// there more than this after the oldest unacknowledged send, while
	// the peer is heard on another plane.
	WaitLimit time.Duration
}

// DefaultEvidence is what the agent uses: a wait limit of a few RTOs on a
// data-centre fabric, so a failed port shows within a second.
var DefaultEvidence = Evidence{Window: 2 * time.Second, WaitLimit: 500 * time.Millisecond}

// Judge returns, per local plane (by index), the reachable and unreachable
// peers at now, unreachable ones first, the list capped at ListPeers (the
// counts are not capped).
func (e Evidence) Judge(peers []transport.PeerStats, planes int, now time.Time) []contract.PathStatus {
	out := make([]contract.PathStatus, planes)
	within := func(at time.Time, d time.Duration) bool { return !at.IsZero() && now.Sub(at) <= d }
	// failing reports whether data was still being sent on pp's plane
	// lately, more than the wait limit after the oldest unacknowledged
	// send there, while the peer is heard on another plane. An idle
	// connection's last, lost datagram is no such evidence: nothing was
	// sent after it.
	failing := func(ps transport.PeerStats, pp transport.PeerPlane) bool {
		if pp.Unacked.IsZero() || pp.Sent.Sub(pp.Unacked) <= e.WaitLimit || !within(pp.Sent, e.Window) {
			return false
		}
		for _, o := range ps.Planes {
			if o.Plane != pp.Plane && within(o.Heard, e.Window) {
				return true
			}
		}
		return false
	}
	// A plane's failure starts with its oldest such wait: only evidence
	// from after that start (and an RTT's margin) shows it works.
	since := make([]time.Time, planes)
	var live []transport.PeerStats
	for _, ps := range peers {
		if !within(ps.Heard, e.Window) {
			continue
		}
		live = append(live, ps)
		for _, pp := range ps.Planes {
			if pp.Plane >= 0 && pp.Plane < planes && failing(ps, pp) && (since[pp.Plane].IsZero() || pp.Unacked.Before(since[pp.Plane])) {
				since[pp.Plane] = pp.Unacked
			}
		}
	}
	for _, ps := range live {
		for _, pp := range ps.Planes {
			if pp.Plane < 0 || pp.Plane >= planes {
				continue
			}
			var reachable bool
			if failing(ps, pp) {
				reachable = false
			} else {
				last := pp.Acked
				if pp.Heard.After(last) {
					last = pp.Heard
				}
				if !within(last, e.Window) || (!since[pp.Plane].IsZero() && !last.After(since[pp.Plane].Add(failureMargin))) {
					continue // nothing sent or heard lately: no evidence
				}
				reachable = true
			}
			st := &out[pp.Plane]
			if reachable {
				st.PeersReachable++
			} else {
				st.PeersUnreachable++
			}
			if pp.Addr.IsValid() {
				st.Peers = append(st.Peers, contract.PeerPath{Address: pp.Addr.Addr().Unmap().String(), Reachable: reachable,
					RTTMicros: pp.SmoothedRTT.Microseconds()})
			}
		}
	}
	for i := range out {
		slices.SortFunc(out[i].Peers, func(a, b contract.PeerPath) int {
			if a.Reachable != b.Reachable {
				if !a.Reachable {
					return -1
				}
				return 1
			}
			return cmp.Compare(a.Address, b.Address)
		})
		for _, p := range out[i].Peers {
			if p.Reachable && p.RTTMicros > 0 && (out[i].RTTMicros == 0 || p.RTTMicros < out[i].RTTMicros) {
				out[i].RTTMicros = p.RTTMicros
			}
		}
		if len(out[i].Peers) > ListPeers {
			out[i].Peers = out[i].Peers[:ListPeers]
		}
	}
	return out
}

// ListPeers is how many peers a plane's status lists (unreachable ones
// first): enough to name what fails, small enough that a status of 8
// planes stays a few KiB (contract.MaxPeersPerPlane is what fabricd reads).
const ListPeers = 16

// failureMargin is how much later than a plane's failure started evidence
// must be to show the plane works: datagrams in flight at the failure
// arrive up to an RTT after it.
const failureMargin = 100 * time.Millisecond

// verdicts is the part of the evidence whose change is worth a status
// write at once: per plane, whether any peer is reachable and whether any
// is not.
func verdicts(paths []contract.PathStatus) string {
	var b strings.Builder
	for i, p := range paths {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte(':')
		b.WriteString(strconv.FormatBool(p.PeersReachable > 0))
		b.WriteByte('/')
		b.WriteString(strconv.FormatBool(p.PeersUnreachable > 0))
		b.WriteByte(' ')
	}
	return b.String()
}
