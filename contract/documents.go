package contract

import "time"

// GenerationDoc marks a complete update; written last. It carries what
// all endpoints share (the planes' states), so a plane event writes it and
// no endpoint's own document, and it names the endpoint documents written
// in its generation, so an agent knows whether to wait for its own.
type GenerationDoc struct {
	Schema           string    `json:"schema"`
	Generation       uint64    `json:"generation"`
	ComputedAt       time.Time `json:"computed_at"`
	TopologyRevision int64     `json:"topology_revision"`
	Leader           string    `json:"leader"`
	// Planes are every plane's state; PlanesGeneration is the generation
	// at which they last changed.
	Planes           []PlaneStatus `json:"planes"`
	PlanesGeneration uint64        `json:"planes_generation"`
	// Changed names the endpoints whose document this generation wrote or
	// deleted (at most MaxChanged); ChangedAll says it may be any of them.
	Changed    []string `json:"changed,omitempty"`
	ChangedAll bool     `json:"changed_all,omitempty"`
	// StatusSpreadMS is how long, at least, agents spread the status
	// writes an apply calls for: fabricd sizes it to the fleet, so that a
	// generation every agent applies does not write every status at once
	// (0: the agent's own spread).
	StatusSpreadMS int64 `json:"status_spread_ms,omitempty"`
}

// MaxStatusSpreadMS bounds GenerationDoc.StatusSpreadMS.
const MaxStatusSpreadMS = 60_000

// MaxChanged bounds GenerationDoc.Changed; a generation that wrote more
// endpoint documents sets ChangedAll instead.
const MaxChanged = 256

// PlanesDoc is every plane's state as endpoints see it.
type PlanesDoc struct {
	Schema     string        `json:"schema"`
	Generation uint64        `json:"generation"`
	Planes     []PlaneStatus `json:"planes"`
}

// PlaneStatus is a plane as endpoints see it.
type PlaneStatus struct {
	Name          string  `json:"name"`
	Index         int     `json:"index"`
	State         string  `json:"state"` // healthy, degraded, down or draining
	CapacityRatio float64 `json:"capacity_ratio"`
	Drained       bool    `json:"drained"`
}

// EndpointSpec is an endpoint's own document in etcd
// (endpoints/<endpoint>): what fabricd knows of the endpoint alone. Its
// agent resolves it with the planes of the generation document (Resolve)
// into the EndpointDoc it applies, as fabricd's policy does.
type EndpointSpec struct {
	Schema     string     `json:"schema"`
	Generation uint64     `json:"generation"`
	Endpoint   string     `json:"endpoint"`
	Ports      []SpecPort `json:"ports"`
	// Entropy is the number of paths (UDP source ports) per plane.
	Entropy int `json:"entropy"`
	// DegradedLinkFactor scales the weight of a port whose link is degraded.
	DegradedLinkFactor float64 `json:"degraded_link_factor"`
	Class              string  `json:"class"`
	EgressBps          int64   `json:"egress_bps"`
	IngressBps         int64   `json:"ingress_bps"`
}

// SpecPort is one of an endpoint's ports.
type SpecPort struct {
	Plane    string `json:"plane"`
	Index    int    `json:"index"`
	Address  string `json:"address"`
	SpeedBps int64  `json:"speed_bps,omitempty"`
	// Link is "down" or "degraded"; empty means up. On a plane that is
	// down it is always empty: the plane's state covers its links, so a
	// plane failing does not change the endpoint's document.
	Link string `json:"link,omitempty"`
	// Drained says the port's switch or link is drained.
	Drained bool `json:"drained,omitempty"`
}

// EndpointDoc is the configuration an agent applies: its EndpointSpec
// resolved with the planes. It is not stored in etcd; the agent saves it as
// its last known good configuration and reports its generation.
type EndpointDoc struct {
	Schema     string     `json:"schema"`
	Generation uint64     `json:"generation"`
	Endpoint   string     `json:"endpoint"`
	PathSet    PathSet    `json:"path_set"`
	RatePolicy RatePolicy `json:"rate_policy"`
}

// PathSet is the planes an endpoint sprays over; weights sum to 1.
type PathSet struct {
	Planes []PlanePath `json:"planes"`
	// Fallback says the preferred planes were all unusable, so the set
	// holds what is left (live links on drained planes or drained
	// switches and links, else every port).
	Fallback string `json:"fallback,omitempty"`
}

// PlanePath is one plane of an endpoint's path set.
type PlanePath struct {
	Plane   string  `json:"plane"`
	Index   int     `json:"index"` // position among the topology's planes
	Address string  `json:"address"`
	Weight  float64 `json:"weight"`
	Entropy int     `json:"entropy"`
}

// RatePolicy is what an endpoint enforces: egress cap, the ingress budget
// its receiver grants from, and per-plane caps.
type RatePolicy struct {
	Class      string           `json:"class"`
	EgressBps  int64            `json:"egress_bps"`
	IngressBps int64            `json:"ingress_bps"`
	PlaneCaps  map[string]int64 `json:"plane_caps_bps,omitempty"`
}

// DirectoryPort is one port in the directory.
type DirectoryPort struct {
	Plane   string `json:"plane"`
	Index   int    `json:"index"`
	Address string `json:"address"`
}

// DirectoryDoc lists an endpoint's per-plane addresses, for its peers. It
// changes only with the topology; usability is in PortsDoc.
type DirectoryDoc struct {
	Schema     string          `json:"schema"`
	Generation uint64          `json:"generation"`
	Endpoint   string          `json:"endpoint"`
	Ports      []DirectoryPort `json:"ports"`
}

// PortRef names an endpoint's port on a plane.
type PortRef struct {
	Endpoint string `json:"endpoint"`
	Plane    string `json:"plane"`
}

// PortsDoc lists, fabric-wide, the endpoint ports not to send to for a
// reason of their own (their link is down, or their switch or link is
// drained); ports on a plane that is down or drained are not listed (the
// planes' states cover them). Peers avoid both.
type PortsDoc struct {
	Schema     string    `json:"schema"`
	Generation uint64    `json:"generation"`
	Unusable   []PortRef `json:"unusable"`
}

// PathStatus is an agent's per-plane counters and its evidence of the
// plane (docs/etcd-layout.md, "Endpoint evidence").
type PathStatus struct {
	Plane       string `json:"plane"`
	TxBytes     uint64 `json:"tx_bytes"`
	RxBytes     uint64 `json:"rx_bytes"`
	Retransmits uint64 `json:"retransmits"`
	// LossRatio is retransmitted over sent datagrams on the plane since
	// the agent's previous status.
	LossRatio float64 `json:"loss_ratio"`
	// RTTMicros is the smallest smoothed RTT to a peer on the plane, in
	// µs (0: no sample).
	RTTMicros int64 `json:"rtt_us,omitempty"`
	// PeersReachable counts the peers that acknowledged the endpoint's
	// data on the plane, or were heard on it, within the evidence window;
	// PeersUnreachable those heard on other planes while the endpoint's
	// data on this one waited for an acknowledgement past the wait limit.
	PeersReachable   int `json:"peers_reachable"`
	PeersUnreachable int `json:"peers_unreachable"`
	// Peers lists them (at most MaxPeersPerPlane, unreachable ones first).
	Peers []PeerPath `json:"peers,omitempty"`
}

// PeerPath is what an endpoint sees of one peer on one plane.
type PeerPath struct {
	Address   string `json:"address"` // the peer's IP address on the plane
	Reachable bool   `json:"reachable"`
	RTTMicros int64  `json:"rtt_us,omitempty"`
}

// StatusDoc is what an agent reports under its lease.
type StatusDoc struct {
	Schema            string       `json:"schema"`
	Endpoint          string       `json:"endpoint"`
	AppliedGeneration uint64       `json:"applied_generation"`
	AppliedAt         time.Time    `json:"applied_at"`
	Source            string       `json:"source"` // etcd or last-known-good
	Version           string       `json:"version"`
	Errors            []string     `json:"errors,omitempty"`
	Paths             []PathStatus `json:"paths,omitempty"`
}
