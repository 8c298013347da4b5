package agent

import (
	"net/netip"
	"testing"
	"time"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/transport"
)

func TestEvidenceJudge(t *testing.T) {
	now := time.Date(2026, 12, 6, 0, 0, 10, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	addr := func(s string) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(s), 4793) }
	// A peer that works on plane 0 and whose data on plane 1 waits since
	// 800 ms; one heard only long ago; one whose plane 1 was never used.
	peers := []transport.PeerStats{
		{Heard: ago(time.Millisecond), Planes: []transport.PeerPlane{
			{Plane: 0, Addr: addr("10.0.0.2"), Heard: ago(time.Millisecond), Acked: ago(time.Millisecond), SmoothedRTT: 90 * time.Microsecond},
			{Plane: 1, Addr: addr("10.1.0.2"), Heard: ago(900 * time.Millisecond), Acked: ago(900 * time.Millisecond), Unacked: ago(800 * time.Millisecond), Sent: ago(10 * time.Millisecond)},
		}},
		{Heard: ago(5 * time.Second), Planes: []transport.PeerPlane{
			{Plane: 0, Addr: addr("10.0.0.3"), Heard: ago(5 * time.Second), Unacked: ago(5 * time.Second)},
			{Plane: 1, Addr: addr("10.1.0.3"), Heard: ago(5 * time.Second), Unacked: ago(5 * time.Second)},
		}},
		{Heard: ago(10 * time.Millisecond), Planes: []transport.PeerPlane{
			{Plane: 0, Addr: addr("10.0.0.4"), Heard: ago(10 * time.Millisecond), SmoothedRTT: 50 * time.Microsecond},
			{Plane: 1, Addr: addr("10.1.0.4")},
		}},
	}
	got := DefaultEvidence.Judge(peers, 2, now)
	want := []contract.PathStatus{
		{RTTMicros: 50, PeersReachable: 2, Peers: []contract.PeerPath{{Address: "10.0.0.2", Reachable: true, RTTMicros: 90}, {Address: "10.0.0.4", Reachable: true, RTTMicros: 50}}},
		{PeersUnreachable: 1, Peers: []contract.PeerPath{{Address: "10.1.0.2"}}},
	}
	if verdicts(got) != verdicts(want) || len(got[0].Peers) != 2 || got[0].RTTMicros != 50 || len(got[1].Peers) != 1 ||
		got[0].Peers[0] != want[0].Peers[0] || got[0].Peers[1] != want[0].Peers[1] || got[1].Peers[0] != want[1].Peers[0] {
		t.Fatalf("Judge = %+v\nwant %+v", got, want)
	}

	// Waiting under the limit, with the peer heard nowhere else, or with
	// nothing sent since the wait began (an idle connection whose last
	// datagram was lost), or not lately, is no evidence against the plane.
	for name, pl := range map[string][]transport.PeerPlane{
		"under the wait limit": {{Plane: 0, Heard: ago(0)}, {Plane: 1, Unacked: ago(400 * time.Millisecond), Sent: ago(0)}},
		"heard on no other":    {{Plane: 0}, {Plane: 1, Heard: ago(0), Unacked: ago(time.Second), Sent: ago(0)}},
		"idle since the wait":  {{Plane: 0, Heard: ago(0)}, {Plane: 1, Unacked: ago(time.Second), Sent: ago(time.Second)}},
		"sent long ago":        {{Plane: 0, Heard: ago(0)}, {Plane: 1, Unacked: ago(4 * time.Second), Sent: ago(3 * time.Second)}},
	} {
		got := DefaultEvidence.Judge([]transport.PeerStats{{Heard: ago(0), Planes: pl}}, 2, now)
		if got[1].PeersUnreachable != 0 {
			t.Errorf("%s: %+v, want no unreachable peer on plane 1", name, got[1])
		}
	}

	// A peer heard on a failing plane only before the failure started (or
	// within an RTT's margin of it) shows nothing; heard well after, it
	// shows the plane works.
	failingSince := ago(800 * time.Millisecond)
	for heard, want := range map[time.Duration]int{-50 * time.Millisecond: 0, 50 * time.Millisecond: 0, 300 * time.Millisecond: 1} {
		got := DefaultEvidence.Judge([]transport.PeerStats{
			{Heard: ago(0), Planes: []transport.PeerPlane{{Plane: 0, Heard: ago(0)}, {Plane: 1, Unacked: failingSince, Sent: ago(0)}}},
			{Heard: ago(0), Planes: []transport.PeerPlane{{Plane: 0, Heard: ago(0)}, {Plane: 1, Heard: failingSince.Add(heard)}}},
		}, 2, now)
		if got[1].PeersUnreachable != 1 || got[1].PeersReachable != want {
			t.Errorf("peer heard %v after plane 1 began to fail: %d reachable, %d unreachable; want %d, 1", heard, got[1].PeersReachable, got[1].PeersUnreachable, want)
		}
	}

	// Unreachable peers come first and the list is capped, not the count.
	many := make([]transport.PeerStats, ListPeers+10)
	for i := range many {
		a := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 1)
		many[i] = transport.PeerStats{Heard: ago(0), Planes: []transport.PeerPlane{{Plane: 0, Addr: a, Acked: ago(0)}}}
		if i == len(many)-1 {
			many[i].Planes[0].Unacked, many[i].Planes[0].Sent = ago(time.Second), ago(0)
			many[i].Planes = append(many[i].Planes, transport.PeerPlane{Plane: 1, Heard: ago(0)})
		}
	}
	got = DefaultEvidence.Judge(many, 2, now)
	if len(got[0].Peers) != ListPeers || got[0].Peers[0].Reachable || got[0].PeersReachable != len(many)-1 || got[0].PeersUnreachable != 1 {
		t.Fatalf("capped list: %d peers, first %+v, counts %d/%d", len(got[0].Peers), got[0].Peers[0], got[0].PeersReachable, got[0].PeersUnreachable)
	}
}
