package evidence

import (
	"fmt"
	"net/netip"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/planes"
)

// report is what fabricd keeps of one endpoint's status: per plane name,
// its peer counts and the addresses it reaches.
type report map[string]planeReport

type planeReport struct {
	reachable, unreachable int
	reached                []netip.Addr
}

// vouchKey names an endpoint port by plane and address: others that reach
// it vouch for its link.
type vouchKey struct {
	plane string
	addr  netip.Addr
}

// newReport keeps what judging needs of a parsed status.
func newReport(st contract.StatusDoc) report {
	r := report{}
	for _, p := range st.Paths {
		pr := planeReport{reachable: p.PeersReachable, unreachable: p.PeersUnreachable}
		for _, peer := range p.Peers {
			if a, err := netip.ParseAddr(peer.Address); err == nil && peer.Reachable {
				pr.reached = append(pr.reached, a.Unmap())
			}
		}
		r[p.Plane] = pr
	}
	return r
}

// vouches calls f with each port r's endpoint reaches.
func (r report) vouches(f func(vouchKey)) {
	for plane, pr := range r {
		for _, a := range pr.reached {
			f(vouchKey{plane, a})
		}
	}
}

// Judge gives each link the evidence of its endpoint's reports:
//   - up, when the endpoint reaches a peer on the link's plane;
//   - down, when it reaches none of the peers it sends to on the plane
//     (its own word wins over what others say of it);
//   - up, when it says nothing of the plane and another endpoint reaches
//     the link's address there;
//   - none (left out) otherwise: an idle port proves nothing.
//
// An endpoint that sends to a single peer on a plane cannot tell its own
// port's failure from the peer's: the link is called down on its word,
// and docs/health.md says so.
func Judge(links []planes.Link, reports map[string]report, vouch map[vouchKey]int) map[string]planes.LinkEvidence {
	out := map[string]planes.LinkEvidence{}
	for _, l := range links {
		pr, ok := reports[l.Endpoint][l.Plane]
		n := vouch[vouchKey{l.Plane, l.Address.Unmap()}]
		switch {
		case ok && pr.reachable > 0:
			out[l.Name] = planes.LinkEvidence{State: planes.LinkUp,
				Reason: fmt.Sprintf("%s reaches %s on %s", l.Endpoint, plural(pr.reachable, "peer"), l.Plane)}
		case ok && pr.unreachable > 0:
			out[l.Name] = planes.LinkEvidence{State: planes.LinkDown,
				Reason: fmt.Sprintf("%s reaches none of the %s it sends to on %s", l.Endpoint, plural(pr.unreachable, "peer"), l.Plane)}
		case n > 0:
			out[l.Name] = planes.LinkEvidence{State: planes.LinkUp,
				Reason: fmt.Sprintf("%s reached on %s by %s", l.Endpoint, l.Plane, plural(n, "endpoint"))}
		}
	}
	return out
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
