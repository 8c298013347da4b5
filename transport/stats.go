package transport

import (
	"time"

	"github.com/multiplane/multiplane/transport/internal/ackhandler"
)

// PathStats are the counters of one path of a connection.
type PathStats struct {
	Plane, Entropy   int
	Active, Retired  bool
	PacketsSent      uint64
	BytesSent        uint64 // datagram bytes, headers included
	PacketsAcked     uint64
	PacketsLost      uint64 // declared lost (gap or timeout)
	Retransmits      uint64 // data packets sent again on this path
	SpuriousLosses   uint64 // declared lost, then acknowledged
	Timeouts         uint64
	SpuriousTimeouts uint64 // timeouts undone by a late acknowledgement
	Stalls           uint64 // every path timed out at once: only backed off
	ECNMarks         uint64 // CE marks echoed by the receiver
	// Detections splits PacketsLost and SpuriousLosses by what declared
	// the loss.
	Detections Detections
	// SmoothedRTT is the whole round trip, endpoint delays included;
	// MinRTT and FabricRTT (the smallest sample of the last round) leave
	// out the time datagrams waited in either endpoint, from kernel
	// receive timestamps: they are what congestion control reacts to.
	SmoothedRTT time.Duration
	MinRTT      time.Duration
	FabricRTT   time.Duration
	// CongestionWindow is the path's window, shared by every connection
	// to the peer that uses the path; SharedBytesInFlight is what all of
	// them have in flight on it, BytesInFlight this connection's part.
	CongestionWindow    ByteCount
	BytesInFlight       ByteCount
	SharedBytesInFlight ByteCount
	// WaitingTurns is how many of those connections wait for a turn in
	// the window (see turns.go).
	WaitingTurns int
}

// Detections count the packets each loss detector declared lost and how
// many of them were acknowledged afterwards (spurious).
type Detections struct {
	Gap     DetectorCount // ReorderThreshold later packets acknowledged
	Time    DetectorCount // a later packet acknowledged, reordering window passed
	Shared  DetectorCount // another connection's later packet on the path acknowledged
	Timeout DetectorCount // retransmission timeout
	Removal DetectorCount // the path left the path set
}

// DetectorCount is one loss detector's count.
type DetectorCount struct {
	Lost, Spurious uint64
}

// Add adds o to d.
func (d *Detections) Add(o Detections) {
	mine := d.counts()
	for i, c := range o.counts() {
		mine[i].Lost += c.Lost
		mine[i].Spurious += c.Spurious
	}
}

func (d *Detections) counts() [ackhandler.Detectors]*DetectorCount {
	return [...]*DetectorCount{
		ackhandler.ByGap: &d.Gap, ackhandler.ByTime: &d.Time, ackhandler.ByShared: &d.Shared,
		ackhandler.ByTimeout: &d.Timeout, ackhandler.ByRemoval: &d.Removal,
	}
}

func detections(by [ackhandler.Detectors]ackhandler.DetectorStats) Detections {
	var d Detections
	for i, c := range d.counts() {
		c.Lost, c.Spurious = by[i].Lost, by[i].Spurious
	}
	return d
}

// PlaneConnStats aggregates a connection's paths on one plane.
type PlaneConnStats struct {
	Plane           int
	PacketsSent     uint64
	BytesSent       uint64
	PacketsReceived uint64
	BytesReceived   uint64 // payload bytes that arrived on the plane
	Retransmits     uint64
	PacketsLost     uint64
	ECNMarks        uint64
	SmoothedRTT     time.Duration // smallest over the plane's paths
	Retired         bool          // every path of the plane is retired
}

// ConnStats are a connection's counters.
type ConnStats struct {
	Mode Mode
	// MessagesSent counts messages fully acknowledged; MessagesReceived
	// messages delivered complete.
	MessagesSent, MessagesReceived uint64
	// BytesAcked is message payload acknowledged (goodput sent);
	// BytesReceived is message payload delivered.
	BytesAcked, BytesReceived uint64
	PacketsSent, BytesSent    uint64
	Retransmits               uint64
	SpuriousRetransmits       uint64
	PacketsLost               uint64
	Timeouts                  uint64
	Stalls                    uint64
	ECNMarks                  uint64
	DuplicatePackets          uint64
	// SmoothedRTT is the smallest smoothed RTT over active paths.
	SmoothedRTT time.Duration
	// BytesQueued is message bytes not yet acknowledged.
	BytesQueued ByteCount
	// DatagramSize is the largest datagram the connection sends: the
	// smaller of the two ends' Config.MaxDatagramSize, agreed in the
	// handshake.
	DatagramSize ByteCount
	// RateGrant is the rate the peer's receiver last granted, in this
	// connection's ACKs, to this endpoint: all of its connections to the
	// peer together (0: none).
	RateGrant         Rate
	PathSetGeneration uint64
	Planes            []PlaneConnStats
	Paths             []PathStats
}

// Stats returns the connection's counters.
func (c *Conn) Stats() ConnStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := ConnStats{
		Mode:              c.mode,
		MessagesSent:      c.stats.msgsSent,
		MessagesReceived:  c.stats.msgsRecv,
		BytesAcked:        c.stats.bytesAcked,
		BytesReceived:     c.stats.bytesRecv,
		Retransmits:       c.stats.retransmits,
		DuplicatePackets:  c.stats.dupPkts,
		BytesQueued:       c.queued,
		DatagramSize:      c.dgram,
		RateGrant:         c.grant,
		Planes:            make([]PlaneConnStats, len(c.peerAddrs)),
		PathSetGeneration: c.generation,
	}
	for i := range s.Planes {
		s.Planes[i].Plane = i
		s.Planes[i].PacketsReceived = c.stats.planeRxPkts[i]
		s.Planes[i].BytesReceived = c.stats.planeRxBytes[i]
		s.Planes[i].Retired = true
	}
	for _, p := range c.paths {
		st := p.sent.Stats()
		window, shared := p.shared.cc.Snapshot()
		ps := PathStats{
			Plane: p.plane, Entropy: p.entropy, Active: p.idx >= 0,
			Retired:     p.idx >= 0 && c.sel.Retired(p.idx),
			PacketsSent: st.PacketsSent, BytesSent: st.BytesSent, PacketsAcked: st.PacketsAcked,
			PacketsLost: st.PacketsLost, Retransmits: p.retx, SpuriousLosses: st.SpuriousLosses,
			Detections: detections(st.ByDetector),
			Timeouts:   st.Timeouts, SpuriousTimeouts: st.SpuriousTimeouts, Stalls: st.Stalls, ECNMarks: st.ECNMarks, SmoothedRTT: st.SmoothedRTT, MinRTT: st.MinRTT, FabricRTT: st.FabricRTT,
			CongestionWindow: window, BytesInFlight: st.BytesInFly, SharedBytesInFlight: shared, WaitingTurns: p.shared.waitingTurns(),
		}
		s.Paths = append(s.Paths, ps)
		s.PacketsSent += st.PacketsSent
		s.BytesSent += st.BytesSent
		s.SpuriousRetransmits += st.SpuriousLosses
		s.PacketsLost += st.PacketsLost
		s.Timeouts += st.Timeouts
		s.Stalls += st.Stalls
		s.ECNMarks += st.ECNMarks
		pl := &s.Planes[p.plane]
		pl.PacketsSent += st.PacketsSent
		pl.BytesSent += st.BytesSent
		pl.Retransmits += p.retx
		pl.PacketsLost += st.PacketsLost
		pl.ECNMarks += st.ECNMarks
		if ps.Active && !ps.Retired {
			pl.Retired = false
		}
		if ps.Active && st.PacketsAcked > 0 {
			if pl.SmoothedRTT == 0 || st.SmoothedRTT < pl.SmoothedRTT {
				pl.SmoothedRTT = st.SmoothedRTT
			}
			if s.SmoothedRTT == 0 || st.SmoothedRTT < s.SmoothedRTT {
				s.SmoothedRTT = st.SmoothedRTT
			}
		}
	}
	for i := range s.Planes {
		if s.Planes[i].PacketsSent == 0 {
			s.Planes[i].Retired = false
		}
	}
	return s
}
