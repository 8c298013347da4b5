// Package ioengine moves UDP datagrams between the transport and the
// kernel in batches.
//
// A Port is one UDP socket (one plane port, or one extra entropy source
// port). Its poll loop (Run) reads up to BatchSize datagrams per system call
// (recvmmsg) into buffers it owns and hands the whole batch to a handler on
// the same goroutine, so no packet crosses a goroutine on its own. Sending
// takes a Batch from the pool, fills it and writes it with one sendmmsg.
// Buffers and batches are pooled: steady-state sending and receiving
// allocate nothing per packet.
//
// Poll modes: PollBusy spins on non-blocking reads (MSG_DONTWAIT), lowest
// latency at the cost of a core (RunAll spins over several ports on one); PollAdaptive (default) spins for
// SpinDuration after the last datagram and then blocks in the Go netpoller;
// PollBlocking always blocks. Sockets get large SO_RCVBUF/SO_SNDBUF (the
// FORCE variants when running as root), SO_RXQ_OVFL to count datagrams the
// kernel dropped for lack of buffer, and ECN: outgoing datagrams carry
// ECT(0) through IP_TOS and the TOS byte of incoming ones is read through
// IP_RECVTOS so CE marks reach the transport.
//
// On Linux the batch calls are made directly on the socket (zero
// allocations); elsewhere, or with Config.Portable, the engine uses
// golang.org/x/net/ipv4 ReadBatch/WriteBatch, which allocates a net.Addr
// per received datagram.
package ioengine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// spinners counts goroutines of this process currently spinning in
// adaptive mode; an adaptive loop spins only while it holds one of
// SpinSlots() slots, so spinning never takes the cores the kernel, the
// peer and the other loops need (on 2 cores there is no slot: adaptive
// behaves as blocking).
var spinners atomic.Int32

// SpinSlots returns how many goroutines may spin at once in adaptive mode:
// a quarter of GOMAXPROCS.
func SpinSlots() int32 { return int32(runtime.GOMAXPROCS(0) / 4) }

// TrySpin takes a spin slot; the caller spins only if it returns true and
// then calls DoneSpin.
func TrySpin() bool {
	for {
		n := spinners.Load()
		if n >= SpinSlots() {
			return false
		}
		if spinners.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// DoneSpin returns a slot taken by TrySpin.
func DoneSpin() { spinners.Add(-1) }

// PollMode selects how a poll loop waits for datagrams.
type PollMode int

// Poll modes.
const (
	PollAdaptive PollMode = iota
	PollBusy
	PollBlocking
)

func (m PollMode) String() string {
	switch m {
	case PollAdaptive:
		return "adaptive"
	case PollBusy:
		return "busy"
	case PollBlocking:
		return "blocking"
	}
	return fmt.Sprintf("PollMode(%d)", int(m))
}

// ParsePollMode parses "adaptive", "busy" or "blocking".
func ParsePollMode(s string) (PollMode, error) {
	switch s {
	case "", "adaptive":
		return PollAdaptive, nil
	case "busy":
		return PollBusy, nil
	case "blocking":
		return PollBlocking, nil
	}
	return 0, fmt.Errorf("ioengine: unknown poll mode %q", s)
}

// ECN codepoints (low two bits of the TOS byte).
const (
	ECNNotECT = 0x00
	ECNECT1   = 0x01
	ECNECT0   = 0x02
	ECNCE     = 0x03
)

// ErrClosed is returned by operations on a closed Port.
var ErrClosed = errors.New("ioengine: port closed")

// Config configures a Port.
type Config struct {
	Mode PollMode
	// BatchSize is the most datagrams per system call (default 64).
	BatchSize int
	// BufferSize is the size of each datagram buffer (default 9216).
	BufferSize int
	// SocketBuffer is SO_RCVBUF and SO_SNDBUF (default 8 MiB).
	SocketBuffer int
	// SpinDuration is how long an adaptive loop spins without traffic
	// before blocking (default 50µs).
	SpinDuration time.Duration
	// ECN marks sent datagrams ECT(0) and reads the TOS byte of received ones.
	ECN bool
	// GSO sends runs of equal-size datagrams to one address as one
	// UDP_SEGMENT send (Linux; turned off by itself where the kernel or
	// device refuses it).
	GSO bool
	// Portable forces the golang.org/x/net/ipv4 engine on Linux too.
	Portable bool
	Logger   *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.BatchSize <= 0 {
		c.BatchSize = 64
	}
	if c.BufferSize <= 0 {
		c.BufferSize = 9216
	}
	if c.SocketBuffer <= 0 {
		c.SocketBuffer = 8 << 20
	}
	if c.SpinDuration <= 0 {
		c.SpinDuration = 50 * time.Microsecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Packet is one datagram in a Batch.
type Packet struct {
	// Buf is the datagram buffer; on receive its length is the datagram's.
	Buf []byte
	// Addr is the source (received) or destination (to send).
	Addr netip.AddrPort
	// TOS is the received TOS byte (ECN in the low two bits).
	TOS byte
	// RxTime is when the kernel received the datagram (SO_TIMESTAMPNS,
	// Unix nanoseconds), 0 when unknown. The transport subtracts the time
	// a datagram waited for its poll loop from RTT samples.
	RxTime int64
	buf    []byte // full-capacity buffer
}

// Reset makes p's buffer empty with full capacity, for appending.
func (p *Packet) Reset() { p.Buf = p.buf[:0] }

// Batch is a set of datagrams passed as a unit.
type Batch struct {
	Pkts []Packet // len = datagrams in use
	all  []Packet
	pool *Pool
}

// Next returns the next free packet of the batch (its Buf reset) or nil if
// the batch is full.
func (b *Batch) Next() *Packet {
	if len(b.Pkts) == len(b.all) {
		return nil
	}
	b.Pkts = b.all[:len(b.Pkts)+1]
	p := &b.Pkts[len(b.Pkts)-1]
	p.Reset()
	return p
}

// Full reports whether no packet is free.
func (b *Batch) Full() bool { return len(b.Pkts) == len(b.all) }

// Release returns the batch to its pool.
func (b *Batch) Release() {
	b.Pkts = b.all[:0]
	if b.pool != nil {
		b.pool.p.Put(b)
	}
}

// Pool hands out batches of a fixed size.
type Pool struct {
	p sync.Pool
}

// NewPool returns a pool of batches of n buffers of size bytes.
func NewPool(n, size int) *Pool {
	pl := &Pool{}
	pl.p.New = func() any {
		b := &Batch{all: make([]Packet, n), pool: pl}
		mem := make([]byte, n*size)
		for i := range b.all {
			b.all[i].buf = mem[i*size : (i+1)*size : (i+1)*size]
		}
		b.Pkts = b.all[:0]
		return b
	}
	return pl
}

// Get returns an empty batch.
func (pl *Pool) Get() *Batch { return pl.p.Get().(*Batch) }

// Stats are a Port's counters.
type Stats struct {
	RxPackets, RxBatches, RxBytes uint64
	TxPackets, TxBatches, TxBytes uint64
	TxErrors                      uint64
	// KernelDrops is the receive-buffer overflow count (SO_RXQ_OVFL).
	KernelDrops uint64
	// Blocks counts times the poll loop went to sleep.
	Blocks uint64
}

type counters struct {
	rxPackets, rxBatches, rxBytes atomic.Uint64
	txPackets, txBatches, txBytes atomic.Uint64
	txErrors, kernelDrops, blocks atomic.Uint64
}

// batcher is the OS-specific batch I/O.
type batcher interface {
	// read fills b with up to len(b.all) datagrams; block says whether to
	// wait for one. It returns 0, nil when nothing is ready and !block.
	read(b *Batch, block bool) (int, error)
	// write sends every packet of b.
	write(b *Batch) error
}

// Port is one UDP socket with a batched poll loop.
type Port struct {
	cfg    Config
	conn   *net.UDPConn
	local  netip.AddrPort
	io     batcher
	pool   *Pool
	c      counters
	closed atomic.Bool
	wmu    sync.Mutex // serializes writers sharing the socket's send state
}

// Listen opens a Port on addr (port 0 picks one).
func Listen(addr netip.AddrPort, cfg Config) (*Port, error) {
	cfg = cfg.withDefaults()
	network := "udp4"
	if addr.Addr().Is6() && !addr.Addr().Is4In6() {
		network = "udp6"
	}
	conn, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, fmt.Errorf("ioengine: listen %v: %w", addr, err)
	}
	p := &Port{cfg: cfg, conn: conn, pool: NewPool(cfg.BatchSize, cfg.BufferSize)}
	p.local = conn.LocalAddr().(*net.UDPAddr).AddrPort()
	if err := tuneSocket(conn, &cfg); err != nil {
		cfg.Logger.Warn("socket tuning incomplete", "addr", p.local, "err", err)
	}
	if !cfg.Portable {
		p.io, err = newRawBatcher(conn, p, cfg.BatchSize)
		if err != nil {
			conn.Close()
			return nil, err
		}
	}
	if p.io == nil {
		p.io = newXNetBatcher(conn, p, cfg.BatchSize)
	}
	return p, nil
}

// LocalAddr returns the bound address.
func (p *Port) LocalAddr() netip.AddrPort { return p.local }

// Pool returns the port's batch pool (for building batches to send).
func (p *Port) Pool() *Pool { return p.pool }

// Send writes every packet of b (their Buf and Addr). It does not release b.
func (p *Port) Send(b *Batch) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if len(b.Pkts) == 0 {
		return nil
	}
	p.wmu.Lock()
	err := p.io.write(b)
	p.wmu.Unlock()
	if err != nil && p.closed.Load() {
		return ErrClosed
	}
	return err
}

// Run is the poll loop: it reads batches and calls handle with each, on
// this goroutine, until ctx ends or the port closes. handle must not keep
// the batch or its buffers.
func (p *Port) Run(ctx context.Context, handle func(*Batch)) error {
	if p.cfg.Mode == PollBusy {
		return RunAll(ctx, []*Port{p}, func(_ int, b *Batch) { handle(b) })
	}
	stop := context.AfterFunc(ctx, func() { p.Close() })
	defer stop()
	b := p.pool.Get()
	defer b.Release()
	var lastRx time.Time
	spins := 0
	spinning := false
	defer func() {
		if spinning {
			DoneSpin()
		}
	}()
	for {
		block := false
		switch p.cfg.Mode {
		case PollBlocking:
			block = true
		case PollAdaptive:
			if !spinning {
				block = true
			} else if spins&15 == 15 && time.Since(lastRx) > p.cfg.SpinDuration {
				// Check the clock only every 16 empty polls.
				block = true
				spinning = false
				DoneSpin()
			}
		}
		if block {
			p.c.blocks.Add(1)
		}
		n, err := p.io.read(b, block)
		if err != nil {
			if stop, err := p.readFailed(ctx, err); stop {
				return err
			}
			continue
		}
		if n == 0 {
			spins++
			if p.closed.Load() {
				return nil
			}
			if spins&3 == 3 {
				yield()
			}
			continue
		}
		spins = 0
		if p.cfg.Mode == PollAdaptive {
			lastRx = time.Now()
			if !spinning {
				spinning = TrySpin()
			}
		}
		p.c.rxBatches.Add(1)
		p.c.rxPackets.Add(uint64(n))
		handle(b)
		b.Pkts = b.all[:0]
	}
}

// RunAll is the busy poll loop of several ports on one goroutine, as a
// poll-mode driver's core polls its queues: it reads each port in turn
// without blocking and calls handle(i, batch) with what port i had, until
// ctx ends or a port closes. One spinning goroutine per transport, however
// many planes, leaves the other cores to the application and the kernel.
func RunAll(ctx context.Context, ports []*Port, handle func(int, *Batch)) error {
	stop := context.AfterFunc(ctx, func() {
		for _, p := range ports {
			p.Close()
		}
	})
	defer stop()
	bs := make([]*Batch, len(ports))
	for i, p := range ports {
		bs[i] = p.pool.Get()
		defer bs[i].Release()
	}
	idle := 0
	for {
		got := false
		for i, p := range ports {
			if p.closed.Load() {
				return nil
			}
			n, err := p.io.read(bs[i], false)
			if err != nil {
				if stop, err := p.readFailed(ctx, err); stop {
					return err
				}
				continue
			}
			if n == 0 {
				continue
			}
			got = true
			p.c.rxBatches.Add(1)
			p.c.rxPackets.Add(uint64(n))
			handle(i, bs[i])
			bs[i].Pkts = bs[i].all[:0]
		}
		if got {
			idle = 0
			continue
		}
		// Let the goroutines that send and deliver run between sweeps.
		if idle++; idle&3 == 3 {
			yield()
		}
	}
}

// readFailed tells a poll loop what a failed read means: stop (with nil
// when the port closed or ctx ended, else the error) or, for a transient
// error, go on.
func (p *Port) readFailed(ctx context.Context, err error) (stop bool, _ error) {
	switch {
	case p.closed.Load() || ctx.Err() != nil:
		return true, nil
	case isTransient(err):
		return false, nil
	}
	return true, fmt.Errorf("ioengine: read on %v: %w", p.local, err)
}

// Close closes the socket; Run returns.
func (p *Port) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	return p.conn.Close()
}

// Stats returns the port's counters.
func (p *Port) Stats() Stats {
	return Stats{
		RxPackets: p.c.rxPackets.Load(), RxBatches: p.c.rxBatches.Load(), RxBytes: p.c.rxBytes.Load(),
		TxPackets: p.c.txPackets.Load(), TxBatches: p.c.txBatches.Load(), TxBytes: p.c.txBytes.Load(),
		TxErrors: p.c.txErrors.Load(), KernelDrops: p.c.kernelDrops.Load(), Blocks: p.c.blocks.Load(),
	}
}
