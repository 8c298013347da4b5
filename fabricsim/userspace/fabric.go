package userspace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"
)

// Fabric is a running emulated fabric. Its methods are safe for concurrent use.
type Fabric struct {
	cfg    Config
	log    *slog.Logger
	epoch  time.Time
	planes []*plane
	pool   sync.Pool

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	closed atomic.Bool
}

// plane is one plane's relay.
type plane struct {
	f      *Fabric
	idx    int
	cfg    PlaneConfig // static parts: queue, reorder, delay, ECN, seed
	up     atomic.Bool
	rate   atomic.Int64
	loss   atomic.Uint64 // math.Float64bits
	ports  []*port
	drops  dropCounters
	hasTOS bool
}

// packet is a datagram in flight through a plane.
type packet struct {
	buf []byte
	oob []byte
	n   int
	tos byte
	src int   // ingress port (sending host)
	at  int64 // release time, ns since epoch
}

// Start creates the relay sockets of every plane and starts forwarding. It
// returns when the sockets are bound; cancelling ctx or calling Close stops
// the fabric.
func Start(ctx context.Context, cfg Config) (*Fabric, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	f := &Fabric{cfg: c, log: c.Logger.With("component", "fabricsim"), epoch: time.Now(), cancel: cancel}
	f.pool.New = func() any {
		return &packet{buf: make([]byte, c.MaxDatagram), oob: make([]byte, 64)}
	}
	for pi, pc := range c.Planes {
		p := &plane{f: f, idx: pi, cfg: pc}
		p.up.Store(true)
		p.rate.Store(pc.RateBps)
		p.loss.Store(math.Float64bits(pc.Loss))
		f.planes = append(f.planes, p)
		for h := range c.Hosts {
			pt, err := p.newPort(h)
			if err != nil {
				f.closeSockets()
				cancel()
				return nil, err
			}
			p.ports = append(p.ports, pt)
		}
	}
	for _, p := range f.planes {
		for _, pt := range p.ports {
			f.wg.Add(2)
			go func() { defer f.wg.Done(); pt.readLoop(ctx) }()
			go func() { defer f.wg.Done(); pt.writeLoop(ctx) }()
		}
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		<-ctx.Done()
		f.closed.Store(true)
		f.closeSockets()
	}()
	f.log.Info("fabric started", "hosts", c.Hosts, "planes", len(c.Planes), "port", c.Port)
	return f, nil
}

func (f *Fabric) closeSockets() {
	for _, p := range f.planes {
		for _, pt := range p.ports {
			if pt != nil {
				_ = pt.conn.Close()
			}
		}
	}
}

// Close stops the fabric and waits for its goroutines. Datagrams in the
// queues are dropped.
func (f *Fabric) Close() error {
	f.once.Do(func() {
		f.cancel()
		f.wg.Wait()
	})
	return nil
}

func (f *Fabric) now() int64 { return int64(time.Since(f.epoch)) }

// Hosts returns the number of hosts.
func (f *Fabric) Hosts() int { return f.cfg.Hosts }

// Planes returns the number of planes.
func (f *Fabric) Planes() int { return len(f.planes) }

// Port returns the relay port (Config.Port or its default).
func (f *Fabric) Port() int { return f.cfg.Port }

// LocalAddr is the address host binds its transport sockets to on plane:
// 127.77.<plane>.<host+1>.
func (f *Fabric) LocalAddr(host, plane int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 77, byte(plane), byte(host + 1)})
}

// ListenAddr is where host's transport listens on plane to receive relayed
// datagrams: LocalAddr(host, plane) with Port.
func (f *Fabric) ListenAddr(host, plane int) netip.AddrPort {
	return netip.AddrPortFrom(f.LocalAddr(host, plane), uint16(f.cfg.Port))
}

// PeerAddr is where the other hosts send to reach host on plane:
// 127.78.<plane>.<host+1>:Port.
func (f *Fabric) PeerAddr(host, plane int) netip.AddrPort {
	return netip.AddrPortFrom(relayAddr(host, plane), uint16(f.cfg.Port))
}

func relayAddr(host, plane int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 78, byte(plane), byte(host + 1)})
}

func (f *Fabric) plane(i int) *plane {
	if i < 0 || i >= len(f.planes) {
		panic(fmt.Sprintf("userspace: plane %d out of range [0,%d)", i, len(f.planes)))
	}
	return f.planes[i]
}

// SetUp brings a whole plane up or down. A down plane drops every datagram,
// including those already queued.
func (f *Fabric) SetUp(plane int, up bool) {
	p := f.plane(plane)
	if p.up.Swap(up) != up {
		f.log.Info("plane state", "plane", plane, "up", up)
	}
}

// SetLinkUp brings the link between host and plane up or down.
func (f *Fabric) SetLinkUp(host, plane int, up bool) {
	p := f.plane(plane)
	if host < 0 || host >= len(p.ports) {
		panic(fmt.Sprintf("userspace: host %d out of range", host))
	}
	if p.ports[host].up.Swap(up) != up {
		f.log.Info("link state", "plane", plane, "host", host, "up", up)
	}
}

// PlaneUp reports whether a plane is up (SetUp).
func (f *Fabric) PlaneUp(plane int) bool { return f.plane(plane).up.Load() }

// LinkUp reports whether the link between host and plane is up
// (SetLinkUp), whatever the plane's state.
func (f *Fabric) LinkUp(host, plane int) bool {
	p := f.plane(plane)
	if host < 0 || host >= len(p.ports) {
		panic(fmt.Sprintf("userspace: host %d out of range", host))
	}
	return p.ports[host].up.Load()
}

// SetLoss sets a plane's random loss probability (0..1).
func (f *Fabric) SetLoss(plane int, loss float64) {
	f.plane(plane).loss.Store(math.Float64bits(min(max(loss, 0), 1)))
}

// SetRate sets the line rate of a plane's egress ports in bit/s (0 =
// unlimited). The queue limit stays as configured.
func (f *Fabric) SetRate(plane int, bps int64) {
	f.plane(plane).rate.Store(max(bps, 0))
}

// Stats returns a snapshot of a plane's state and counters.
func (f *Fabric) Stats(plane int) PlaneStats {
	p := f.plane(plane)
	s := PlaneStats{
		Plane:   plane,
		Up:      p.up.Load(),
		RateBps: p.rate.Load(),
		Loss:    math.Float64frombits(p.loss.Load()),
		Drops: Drops{
			Loss: p.drops.loss.Load(), QueueOverflow: p.drops.overflow.Load(),
			Down: p.drops.down.Load(), Unroutable: p.drops.unroutable.Load(),
		},
		ECNMarked: p.drops.ecn.Load(),
	}
	for h, pt := range p.ports {
		st := "UP"
		if !s.Up || !pt.up.Load() {
			st = "DOWN"
		}
		s.Ports = append(s.Ports, PortStats{Host: h, Name: fmt.Sprintf("eth%d", h+1), OperStatus: st, Counters: pt.ctr.snapshot()})
	}
	return s
}

// port is the switch port of one host on one plane: the relay socket that
// receives datagrams addressed to the host, and the egress queue towards it.
type port struct {
	p    *plane
	host int
	conn *net.UDPConn
	pc   *ipv4.PacketConn
	dst  *net.UDPAddr // the host's transport socket: 127.77.p.h+1:Port
	up   atomic.Bool
	ctr  portCounters

	mu       sync.Mutex
	nextFree int64 // when the egress line is free, ns since epoch
	fifo     queue // release times nondecreasing
	held     queue // reordered datagrams, release times nondecreasing
	wake     chan struct{}
}

func (p *plane) newPort(h int) (*port, error) {
	f := p.f
	laddr := net.UDPAddrFromAddrPort(netip.AddrPortFrom(relayAddr(h, p.idx), uint16(f.cfg.Port)))
	c, err := net.ListenUDP("udp4", laddr)
	if err != nil {
		return nil, fmt.Errorf("userspace: plane %d host %d: %w", p.idx, h, err)
	}
	tos, err := tuneSocket(c, f.cfg.SocketBuffer)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("userspace: plane %d host %d: socket options: %w", p.idx, h, err)
	}
	if !tos && h == 0 {
		f.log.Warn("no IP_RECVTOS: ECN not relayed", "plane", p.idx)
	}
	p.hasTOS = tos
	pt := &port{
		p: p, host: h, conn: c, pc: ipv4.NewPacketConn(c),
		dst:  net.UDPAddrFromAddrPort(f.ListenAddr(h, p.idx)),
		wake: make(chan struct{}, 1),
	}
	pt.up.Store(true)
	return pt, nil
}

const batchSize = 64

// readLoop receives datagrams addressed to this port's host and queues them
// at this port's egress.
func (pt *port) readLoop(ctx context.Context) {
	p, f := pt.p, pt.p.f
	rng := newRNG(p.cfg.Seed, pt.host)
	msgs := make([]ipv4.Message, batchSize)
	pkts := make([]*packet, batchSize)
	for i := range msgs {
		pkts[i] = f.pool.Get().(*packet)
		msgs[i].Buffers = [][]byte{pkts[i].buf}
		msgs[i].OOB = pkts[i].oob
	}
	for {
		n, err := pt.pc.ReadBatch(msgs, 0)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			f.log.Warn("relay read failed", "plane", p.idx, "host", pt.host, "err", err)
			continue
		}
		now := f.now()
		for i := range n {
			m := &msgs[i]
			if pt.accept(m, pkts[i], now, rng) {
				pkts[i] = f.pool.Get().(*packet)
				m.Buffers[0] = pkts[i].buf
				m.OOB = pkts[i].oob
			}
			m.OOB = m.OOB[:cap(m.OOB)]
		}
	}
}

const msgTrunc = 0x20 // MSG_TRUNC

// accept classifies one received datagram and, unless dropped, queues it at
// this port's egress. It reports whether it kept pkt.
func (pt *port) accept(m *ipv4.Message, pkt *packet, now int64, rng *rng) bool {
	p := pt.p
	ua, _ := m.Addr.(*net.UDPAddr)
	var src = -1
	if ua != nil {
		if ip4 := ua.IP.To4(); ip4 != nil && ip4[0] == 127 && ip4[1] == 77 && int(ip4[2]) == p.idx && ip4[3] >= 1 && int(ip4[3]) <= len(p.ports) {
			src = int(ip4[3]) - 1
		}
	}
	if src < 0 {
		p.drops.unroutable.Add(1)
		return false
	}
	in := p.ports[src]
	if m.Flags&msgTrunc != 0 {
		in.ctr.inErrors.Add(1)
		p.drops.unroutable.Add(1)
		return false
	}
	if !p.up.Load() || !in.up.Load() {
		in.ctr.inDiscards.Add(1)
		p.drops.down.Add(1)
		return false
	}
	in.ctr.inPkts.Add(1)
	in.ctr.inOctets.Add(uint64(m.N))
	if !pt.up.Load() {
		pt.ctr.outDiscards.Add(1)
		p.drops.down.Add(1)
		return false
	}
	if loss := math.Float64frombits(p.loss.Load()); loss > 0 && rng.float64() < loss {
		in.ctr.inErrors.Add(1)
		p.drops.loss.Add(1)
		return false
	}
	pkt.n = m.N
	pkt.src = src
	pkt.tos = 0
	if p.hasTOS {
		pkt.tos = parseTOS(m.OOB[:m.NN])
	}
	reorder := p.cfg.Reorder > 0 && rng.float64() < p.cfg.Reorder

	pt.mu.Lock()
	depart := now
	if rate := p.rate.Load(); rate > 0 {
		start := max(now, pt.nextFree)
		backlog := int((start - now) * rate / 8e9)
		if backlog+pkt.n > p.cfg.QueueBytes {
			pt.mu.Unlock()
			pt.ctr.outDiscards.Add(1)
			p.drops.overflow.Add(1)
			return false
		}
		if thr := p.cfg.ECNThresholdBytes; thr > 0 && backlog > thr && pkt.tos&3 != 0 && pkt.tos&3 != 3 {
			pkt.tos |= 3
			pt.ctr.outECN.Add(1)
			p.drops.ecn.Add(1)
		}
		pt.nextFree = start + int64(pkt.n)*8e9/rate
		depart = pt.nextFree
	}
	pkt.at = depart + int64(p.cfg.Delay)
	if reorder {
		pkt.at += int64(p.cfg.ReorderDelay)
		pt.held.push(pkt)
	} else {
		pt.fifo.push(pkt)
	}
	pt.mu.Unlock()
	select {
	case pt.wake <- struct{}{}:
	default:
	}
	return true
}

// slack is how early a datagram may leave: it lets one timer wake-up send
// several datagrams instead of one each.
const slack = int64(100 * time.Microsecond)

// writeLoop sends queued datagrams to this port's host when they are due,
// each from the relay socket of the host that sent it.
func (pt *port) writeLoop(ctx context.Context) {
	f := pt.p.f
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	batch := make([]*packet, 0, batchSize)
	msgs := make([]ipv4.Message, batchSize)
	for i := range msgs {
		msgs[i].Buffers = make([][]byte, 1)
	}
	for {
		batch = batch[:0]
		now := f.now()
		next := int64(-1)
		pt.mu.Lock()
		for len(batch) < batchSize {
			a, b := pt.fifo.peek(), pt.held.peek()
			q := &pt.fifo
			if a == nil || (b != nil && b.at < a.at) {
				a, q = b, &pt.held
			}
			if a == nil {
				break
			}
			if a.at > now+slack {
				next = a.at
				break
			}
			batch = append(batch, q.pop())
		}
		pt.mu.Unlock()
		if len(batch) > 0 {
			pt.send(batch, msgs)
			continue
		}
		if next >= 0 {
			timer.Reset(time.Duration(next - now))
		}
		select {
		case <-ctx.Done():
			return
		case <-pt.wake:
		case <-timer.C:
		}
		if next >= 0 && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

func (pt *port) send(batch []*packet, msgs []ipv4.Message) {
	p, f := pt.p, pt.p.f
	if !p.up.Load() || !pt.up.Load() {
		for _, pkt := range batch {
			pt.ctr.outDiscards.Add(1)
			p.drops.down.Add(1)
			f.pool.Put(pkt)
		}
		return
	}
	for len(batch) > 0 {
		// One run of datagrams from the same source host leaves from that
		// host's relay socket.
		src := batch[0].src
		n := 1
		for n < len(batch) && batch[n].src == src {
			n++
		}
		run := batch[:n]
		for i, pkt := range run {
			m := &msgs[i]
			m.Buffers[0] = pkt.buf[:pkt.n]
			m.Addr = pt.dst
			m.OOB = nil
			if p.hasTOS {
				m.OOB = putTOS(pkt.oob, pkt.tos)
			}
		}
		out := p.ports[src].pc
		ms := msgs[:n]
		for len(ms) > 0 {
			k, err := out.WriteBatch(ms, 0)
			if err != nil {
				if !f.closed.Load() {
					f.log.Debug("relay write failed", "plane", p.idx, "host", pt.host, "err", err)
				}
				pt.ctr.outErrors.Add(uint64(len(ms)))
				break
			}
			for _, m := range ms[:k] {
				pt.ctr.outOctets.Add(uint64(m.N))
			}
			pt.ctr.outPkts.Add(uint64(k))
			ms = ms[k:]
		}
		for i, pkt := range run {
			msgs[i].Buffers[0] = nil
			msgs[i].OOB = nil
			f.pool.Put(pkt)
		}
		batch = batch[n:]
	}
}

// queue is a FIFO of packets.
type queue struct {
	buf        []*packet
	head, size int
}

func (q *queue) push(p *packet) {
	if q.size == len(q.buf) {
		nb := make([]*packet, max(2*len(q.buf), 256))
		for i := range q.size {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.size)%len(q.buf)] = p
	q.size++
}

func (q *queue) peek() *packet {
	if q.size == 0 {
		return nil
	}
	return q.buf[q.head]
}

func (q *queue) pop() *packet {
	p := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.size--
	return p
}
