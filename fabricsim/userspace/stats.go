package userspace

import "sync/atomic"

// PortCounters are one switch port's counters, named as the OpenConfig
// interface counters (openconfig-interfaces .../state/counters) so that an
// emulated gNMI switch can serve them directly. "in" is traffic from the
// host into the plane, "out" is traffic from the plane to the host.
type PortCounters struct {
	InPkts      uint64 `json:"in-pkts"`
	InOctets    uint64 `json:"in-octets"`
	InDiscards  uint64 `json:"in-discards"` // dropped on entry because the port or plane is down
	InErrors    uint64 `json:"in-errors"`   // random loss (a corrupted frame) and oversize datagrams
	OutPkts     uint64 `json:"out-pkts"`
	OutOctets   uint64 `json:"out-octets"`
	OutDiscards uint64 `json:"out-discards"` // egress queue overflow, or port down when leaving
	OutErrors   uint64 `json:"out-errors"`   // send failures
	// OutECNMarkedPkts counts datagrams marked CE at this egress port (the
	// ECN counter OpenConfig keeps per queue, summed for the port).
	OutECNMarkedPkts uint64 `json:"out-ecn-marked-pkts"`
}

// PortStats is one port's state and counters.
type PortStats struct {
	Host       int          `json:"host"`
	Name       string       `json:"name"`        // interface name on the emulated switch, "eth<h+1>"
	OperStatus string       `json:"oper-status"` // "UP" or "DOWN"
	Counters   PortCounters `json:"counters"`
}

// Drops counts a plane's dropped datagrams by cause.
type Drops struct {
	Loss          uint64 `json:"loss"`           // random loss
	QueueOverflow uint64 `json:"queue_overflow"` // drop-tail at an egress queue
	Down          uint64 `json:"down"`           // plane or link down
	Unroutable    uint64 `json:"unroutable"`     // unknown source address or oversize
}

// PlaneStats is a snapshot of one plane.
type PlaneStats struct {
	Plane     int         `json:"plane"`
	Up        bool        `json:"up"`
	RateBps   int64       `json:"rate_bps"`
	Loss      float64     `json:"loss"`
	Ports     []PortStats `json:"ports"`
	Drops     Drops       `json:"drops"`
	ECNMarked uint64      `json:"ecn_marked"`
}

type portCounters struct {
	inPkts, inOctets, inDiscards, inErrors     atomic.Uint64
	outPkts, outOctets, outDiscards, outErrors atomic.Uint64
	outECN                                     atomic.Uint64
}

func (c *portCounters) snapshot() PortCounters {
	return PortCounters{
		InPkts: c.inPkts.Load(), InOctets: c.inOctets.Load(),
		InDiscards: c.inDiscards.Load(), InErrors: c.inErrors.Load(),
		OutPkts: c.outPkts.Load(), OutOctets: c.outOctets.Load(),
		OutDiscards: c.outDiscards.Load(), OutErrors: c.outErrors.Load(),
		OutECNMarkedPkts: c.outECN.Load(),
	}
}

type dropCounters struct {
	loss, overflow, down, unroutable, ecn atomic.Uint64
}
