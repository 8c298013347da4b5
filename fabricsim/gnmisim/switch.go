package gnmisim

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openconfig/gnmi/cache"
	pb "github.com/openconfig/gnmi/proto/gnmi"
	"github.com/openconfig/gnmi/subscribe"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Errors of the package.
var (
	ErrClosed     = errors.New("gnmisim: switch closed")
	ErrNoSource   = errors.New("gnmisim: no counter source")
	ErrNoSuchPort = errors.New("gnmisim: no such port")
)

// Config describes one emulated switch.
type Config struct {
	Name    string        // gNMI target name; required
	Address string        // listen address; default "127.0.0.1:0"
	Source  CounterSource // required
	// Tick is how often counters are read and published; default 1 s.
	Tick time.Duration
	// Phase delays the first Tick: switches started together then do not
	// publish in step, as independent switches do not.
	Phase time.Duration
	// Burst publishes as fast as possible instead of every Tick (benchmarks).
	Burst bool
	// OperPoll, when set, also reads the source this often and publishes
	// oper-status and admin-status changes at once, so a link failing in
	// the fabric is pushed within OperPoll rather than the next Tick.
	OperPoll time.Duration
	// TLS, when set, serves gNMI over TLS (set ClientAuth for mTLS).
	TLS *tls.Config
	// Username and Password, when Username is set, are required in the
	// "username"/"password" metadata of every RPC.
	Username, Password string
	// SendTimeout ends a stream whose send blocks this long (the reference
	// server's timeout); default 1 minute.
	SendTimeout time.Duration
	Logger      *slog.Logger
}

// Switch is one emulated gNMI target. Its methods are safe for concurrent use.
type Switch struct {
	cfg  Config
	log  *slog.Logger
	addr string

	mu      sync.Mutex // guards everything below, and serialises publishing
	closed  bool
	serving bool
	srv     *grpc.Server
	cache   *cache.Cache
	sub     *subscribe.Server
	ports   map[string]*portSim
	order   []string
	buf     []PortState
	lastTS  int64
	stall   chan struct{} // non-nil while stalled; closed by Unstall
	readErr error

	streams atomic.Int64
	ticks   atomic.Uint64

	stop chan struct{}
	wg   sync.WaitGroup
}

// portSim is the switch's own view of one port: what it last published and
// what a test changed.
type portSim struct {
	adj         [numCounters]uint64 // added to the source's counters (mod 2^64)
	last        [numCounters]uint64 // last source values
	override    string              // oper-status set by a test; "" = the source's
	oper, admin string              // last published
	transitions uint64
	// The port's notification prefixes, made once: paths are immutable
	// once published (the cache and the subscriptions only read them),
	// so every sample shares them instead of making its own (see leafPath).
	state, counters *pb.Path
	queues          map[string]*pb.Path
}

func (p *portSim) statePrefix(target, iface string) *pb.Path {
	if p.state == nil {
		p.state = statePrefix(target, iface)
	}
	return p.state
}

func (p *portSim) countersPrefix(target, iface string) *pb.Path {
	if p.counters == nil {
		p.counters = countersPrefix(target, iface)
	}
	return p.counters
}

func (p *portSim) queuePrefix(target, iface, queue string) *pb.Path {
	q := p.queues[queue]
	if q == nil {
		if p.queues == nil {
			p.queues = map[string]*pb.Path{}
		}
		q = queuePrefix(target, iface, queue)
		p.queues[queue] = q
	}
	return q
}

// Start starts a switch: it reads its source once, publishes, and serves.
func Start(cfg Config) (*Switch, error) {
	if cfg.Name == "" {
		return nil, errors.New("gnmisim: Config.Name is required")
	}
	if cfg.Source == nil {
		return nil, ErrNoSource
	}
	if cfg.Address == "" {
		cfg.Address = "127.0.0.1:0"
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Switch{cfg: cfg, log: cfg.Logger.With("component", "gnmisim", "switch", cfg.Name),
		ports: map[string]*portSim{}, stop: make(chan struct{})}
	s.newCache()
	if err := s.publish(); err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("gnmisim: %w", err)
	}
	s.addr = lis.Addr().String()
	s.mu.Lock()
	s.serve(lis)
	s.mu.Unlock()
	s.wg.Add(1)
	go s.loop()
	if cfg.OperPoll > 0 && !cfg.Burst {
		s.wg.Add(1)
		go s.pollOper()
	}
	s.log.Info("gnmi target started", "address", s.addr, "ports", len(s.order))
	return s, nil
}

// Name returns the target name.
func (s *Switch) Name() string { return s.cfg.Name }

// Addr returns the bound address, host:port. It stays the same across
// Restart and Stop/Resume.
func (s *Switch) Addr() string { return s.addr }

// Ports returns the port names in source order.
func (s *Switch) Ports() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.order...)
}

// Streams returns the number of Subscribe RPCs being served.
func (s *Switch) Streams() int { return int(s.streams.Load()) }

// Ticks returns how many times the switch has published its counters.
func (s *Switch) Ticks() uint64 { return s.ticks.Load() }

func (s *Switch) newCache() {
	s.cache = cache.New([]string{s.cfg.Name})
	sub, _ := subscribe.NewServer(s.cache, subscribe.WithTimeout(s.cfg.SendTimeout))
	s.sub = sub
	s.cache.SetClient(sub.Update)
}

// serve starts a gRPC server on lis. Called with s.mu held.
func (s *Switch) serve(lis net.Listener) {
	opts := []grpc.ServerOption{
		// Collectors ping often to notice dead links; let them.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
	}
	if s.cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.cfg.TLS)))
	}
	srv := grpc.NewServer(opts...)
	pb.RegisterGNMIServer(srv, &target{s: s, sub: s.sub})
	s.srv = srv
	s.serving = true
	go srv.Serve(lis) //nolint:errcheck // ends with Stop
}

func (s *Switch) loop() {
	defer s.wg.Done()
	var t *time.Ticker
	var tick <-chan time.Time
	if !s.cfg.Burst {
		if s.cfg.Phase > 0 {
			select {
			case <-s.stop:
				return
			case <-time.After(s.cfg.Phase):
			}
		}
		t = time.NewTicker(s.cfg.Tick)
		defer t.Stop()
		tick = t.C
	}
	for {
		if s.cfg.Burst {
			select {
			case <-s.stop:
				return
			default:
				runtime.Gosched() // let the streams send what was published
			}
		} else {
			select {
			case <-s.stop:
				return
			case <-tick:
			}
		}
		if err := s.publish(); err != nil && !errors.Is(err, ErrClosed) {
			s.log.Warn("reading counters failed", "err", err)
		}
	}
}

func (s *Switch) pollOper() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.OperPoll)
	defer t.Stop()
	var buf []PortState
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		buf, _ = s.cfg.Source.Ports(buf[:0])
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		var ts int64
		for i := range buf {
			p := s.ports[buf[i].Name]
			if p == nil || p.override != "" {
				continue
			}
			admin := buf[i].AdminState
			if admin == "" {
				admin = "UP"
			}
			if buf[i].OperStatus != p.oper || admin != p.admin {
				if ts == 0 {
					ts = s.nextTS()
				}
				s.publishStatus(buf[i].Name, p, buf[i].OperStatus, admin, ts)
			}
		}
		s.mu.Unlock()
	}
}

// Publish reads the source and publishes now, without waiting for the tick.
func (s *Switch) Publish() error { return s.publish() }

func (s *Switch) publish() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	var err error
	s.buf, err = s.cfg.Source.Ports(s.buf[:0])
	if err != nil {
		if s.readErr == nil || s.readErr.Error() != err.Error() {
			s.readErr = err
			return fmt.Errorf("gnmisim: %s: %w", s.cfg.Name, err)
		}
		return nil
	}
	s.readErr = nil
	ts := s.nextTS()
	for i := range s.buf {
		s.publishPort(&s.buf[i], ts)
	}
	s.ticks.Add(1)
	return nil
}

// nextTS returns a timestamp later than every one published before.
func (s *Switch) nextTS() int64 {
	ts := time.Now().UnixNano()
	if ts <= s.lastTS {
		ts = s.lastTS + 1
	}
	s.lastTS = ts
	return ts
}

func (s *Switch) port(name string) *portSim {
	p := s.ports[name]
	if p == nil {
		p = &portSim{}
		s.ports[name] = p
		s.order = append(s.order, name)
	}
	return p
}

func (s *Switch) publishPort(ps *PortState, ts int64) {
	p := s.port(ps.Name)
	oper := ps.OperStatus
	if p.override != "" {
		oper = p.override
	}
	s.publishStatus(ps.Name, p, oper, ps.AdminState, ts)
	v := ps.vector()
	p.last = v
	for i := range v {
		v[i] += p.adj[i]
	}
	v[InterfaceTransitions] += p.transitions
	// Queues first: a collector can then fold the queue rates into the
	// interface sample that follows.
	queues := ps.Queues
	if len(queues) == 0 {
		queues = []QueueCounters{{Name: DefaultQueue}}
	}
	for i, q := range queues {
		ecn, drop := q.ECNMarkedPkts, q.DroppedPkts
		if i == 0 {
			ecn, drop = v[ECNMarked], v[QueueDropped]
		}
		s.update(&pb.Notification{Timestamp: ts, Atomic: true, Prefix: p.queuePrefix(s.cfg.Name, ps.Name, q.Name),
			Update: []*pb.Update{
				{Path: leafPath("ecn-marked-pkts"), Val: uintVal(ecn)},
				{Path: leafPath("dropped-pkts"), Val: uintVal(drop)},
			}})
	}
	upd := make([]*pb.Update, len(counterLeaves))
	for i, leaf := range counterLeaves {
		upd[i] = &pb.Update{Path: leafPath(leaf), Val: uintVal(v[i])}
	}
	s.update(&pb.Notification{Timestamp: ts, Atomic: true, Prefix: p.countersPrefix(s.cfg.Name, ps.Name), Update: upd})
}

// publishStatus publishes oper-status and admin-status if they changed.
func (s *Switch) publishStatus(name string, p *portSim, oper, admin string, ts int64) {
	if admin == "" {
		admin = "UP"
	}
	if oper != p.oper {
		if p.oper != "" {
			p.transitions++
		}
		p.oper = oper
		s.update(&pb.Notification{Timestamp: ts, Prefix: p.statePrefix(s.cfg.Name, name),
			Update: []*pb.Update{{Path: leafPath("oper-status"), Val: strVal(oper)}}})
	}
	if admin != p.admin {
		p.admin = admin
		s.update(&pb.Notification{Timestamp: ts, Prefix: p.statePrefix(s.cfg.Name, name),
			Update: []*pb.Update{{Path: leafPath("admin-status"), Val: strVal(admin)}}})
	}
}

func (s *Switch) update(n *pb.Notification) {
	if err := s.cache.GnmiUpdate(n); err != nil {
		s.log.Debug("cache update rejected", "err", err)
	}
}

// SetOperStatus forces a port's oper-status ("UP", "DOWN", ...) and publishes
// it at once; "" hands the port back to the source.
func (s *Switch) SetOperStatus(port, oper string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.ports[port]
	if !ok {
		return fmt.Errorf("%w: %q", ErrNoSuchPort, port)
	}
	p.override = oper
	if oper == "" {
		return nil // the next tick publishes the source's status
	}
	s.publishStatus(port, p, oper, p.admin, s.nextTS())
	return nil
}

// SetCounter makes a port's counter read v now; it keeps counting from
// there (and wraps at 2^64).
func (s *Switch) SetCounter(port string, c Counter, v uint64) error {
	return s.adjust(port, func(p *portSim) {
		if c == InterfaceTransitions {
			p.transitions = 0
		}
		p.adj[c] = v - p.last[c]
	})
}

// AddCounter jumps a port's counter by delta (mod 2^64).
func (s *Switch) AddCounter(port string, c Counter, delta uint64) error {
	return s.adjust(port, func(p *portSim) { p.adj[c] += delta })
}

func (s *Switch) adjust(port string, fn func(*portSim)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.ports[port]
	if !ok {
		return fmt.Errorf("%w: %q", ErrNoSuchPort, port)
	}
	fn(p)
	return nil
}

// ResetCounters sets every counter of every port to 0, as a reboot would,
// without touching the streams. The next tick publishes the zeros.
func (s *Switch) ResetCounters() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetCounters()
}

func (s *Switch) resetCounters() {
	for _, p := range s.ports {
		for i := range p.adj {
			p.adj[i] = -p.last[i]
		}
		p.transitions = 0
	}
}

// Stop makes the target unreachable: the listener and every connection
// close (streams end with an error). The published state is kept; Resume
// serves again on the same address.
func (s *Switch) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.serving = false
	s.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// Resume serves again on the same address after Stop.
func (s *Switch) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.serving {
		return nil
	}
	lis, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("gnmisim: resume %s: %w", s.cfg.Name, err)
	}
	s.serve(lis)
	return nil
}

// Restart emulates a reboot: streams end, the cache is emptied, every
// counter restarts from 0 and the target serves again on the same address.
func (s *Switch) Restart() error {
	s.Stop()
	s.mu.Lock()
	s.resetCounters()
	for _, p := range s.ports {
		p.oper, p.admin = "", ""
	}
	s.newCache()
	s.mu.Unlock()
	if err := s.publish(); err != nil {
		return err
	}
	return s.Resume()
}

// Stall freezes every stream: nothing more is sent, but the RPCs and the TCP
// connections stay open (HTTP/2 pings are still answered), like a target
// whose telemetry process hangs. Unstall resumes them.
func (s *Switch) Stall() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stall == nil {
		s.stall = make(chan struct{})
	}
}

// Unstall lets stalled streams send again.
func (s *Switch) Unstall() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stall != nil {
		close(s.stall)
		s.stall = nil
	}
}

func (s *Switch) stallChan() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stall
}

// PublishGarbage publishes values of the wrong type for a port: strings for
// its counters, an integer for its oper-status, a bool for a queue counter,
// and an enum that does not exist for admin-status. The next tick publishes
// good values again.
func (s *Switch) PublishGarbage(port string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.ports[port]
	if !ok {
		return fmt.Errorf("%w: %q", ErrNoSuchPort, port)
	}
	ts := s.nextTS()
	upd := make([]*pb.Update, len(counterLeaves))
	for i, leaf := range counterLeaves {
		upd[i] = &pb.Update{Path: leafPath(leaf), Val: strVal("garbage")}
	}
	s.update(&pb.Notification{Timestamp: ts, Atomic: true, Prefix: countersPrefix(s.cfg.Name, port), Update: upd})
	s.update(&pb.Notification{Timestamp: ts, Prefix: statePrefix(s.cfg.Name, port),
		Update: []*pb.Update{{Path: leafPath("oper-status"), Val: &pb.TypedValue{Value: &pb.TypedValue_IntVal{IntVal: 7}}}}})
	s.update(&pb.Notification{Timestamp: ts, Prefix: statePrefix(s.cfg.Name, port),
		Update: []*pb.Update{{Path: leafPath("admin-status"), Val: strVal("SIDEWAYS")}}})
	s.update(&pb.Notification{Timestamp: ts, Atomic: true, Prefix: queuePrefix(s.cfg.Name, port, DefaultQueue),
		Update: []*pb.Update{{Path: leafPath("ecn-marked-pkts"), Val: &pb.TypedValue{Value: &pb.TypedValue_BoolVal{BoolVal: true}}}}})
	p.oper, p.admin = "", "" // republish the true status next tick (no transition counted)
	return nil
}

// Close stops the switch and its streams. It is safe to call more than once.
func (s *Switch) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	srv := s.srv
	if s.stall != nil {
		close(s.stall)
		s.stall = nil
	}
	s.mu.Unlock()
	close(s.stop)
	if srv != nil {
		srv.Stop()
	}
	s.wg.Wait()
	return nil
}

// target is the gNMI service: the reference subscribe server behind a shim
// that checks credentials, fills in a missing target and can stall sends.
type target struct {
	pb.UnimplementedGNMIServer
	s   *Switch
	sub *subscribe.Server
}

func (t *target) Capabilities(ctx context.Context, _ *pb.CapabilityRequest) (*pb.CapabilityResponse, error) {
	if err := t.auth(ctx); err != nil {
		return nil, err
	}
	return &pb.CapabilityResponse{
		SupportedModels: []*pb.ModelData{
			{Name: "openconfig-interfaces", Organization: "OpenConfig working group"},
			{Name: "openconfig-qos", Organization: "OpenConfig working group"},
		},
		SupportedEncodings: []pb.Encoding{pb.Encoding_JSON, pb.Encoding_PROTO},
		GNMIVersion:        "0.10.0",
	}, nil
}

func (t *target) Subscribe(stream pb.GNMI_SubscribeServer) error {
	if err := t.auth(stream.Context()); err != nil {
		return err
	}
	t.s.streams.Add(1)
	defer t.s.streams.Add(-1)
	return t.sub.Subscribe(&shimStream{GNMI_SubscribeServer: stream, s: t.s})
}

func (t *target) auth(ctx context.Context) error {
	if t.s.cfg.Username == "" {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if first(md.Get("username")) != t.s.cfg.Username || first(md.Get("password")) != t.s.cfg.Password {
		return status.Error(codes.Unauthenticated, "bad username or password")
	}
	return nil
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

type shimStream struct {
	pb.GNMI_SubscribeServer
	s *Switch
}

// Recv fills in the target when the client left it out.
func (st *shimStream) Recv() (*pb.SubscribeRequest, error) {
	req, err := st.GNMI_SubscribeServer.Recv()
	if sl := req.GetSubscribe(); sl != nil {
		if sl.Prefix == nil {
			sl.Prefix = &pb.Path{}
		}
		if sl.Prefix.Target == "" {
			sl.Prefix.Target = st.s.cfg.Name
		}
	}
	return req, err
}

// Send blocks while the switch is stalled.
func (st *shimStream) Send(r *pb.SubscribeResponse) error {
	for {
		ch := st.s.stallChan()
		if ch == nil {
			break
		}
		select {
		case <-ch:
		case <-st.Context().Done():
			return st.Context().Err()
		}
	}
	return st.GNMI_SubscribeServer.Send(r)
}

// leafPaths are the paths of the leaves a switch publishes, shared by all
// its notifications: at 128,000 emulated ports, a path per leaf and
// sample was a fifth of the benchmark process's heap.
var leafPaths = func() map[string]*pb.Path {
	m := map[string]*pb.Path{}
	for _, name := range append(counterLeaves[:], "ecn-marked-pkts", "dropped-pkts", "oper-status", "admin-status") {
		m[name] = newLeafPath(name)
	}
	return m
}()

// leafPath returns the path of leaf name; the shared one when there is.
// Callers must not modify it.
func leafPath(name string) *pb.Path {
	if p := leafPaths[name]; p != nil {
		return p
	}
	return newLeafPath(name)
}

func newLeafPath(name string) *pb.Path { return &pb.Path{Elem: []*pb.PathElem{{Name: name}}} }

func uintVal(v uint64) *pb.TypedValue {
	return &pb.TypedValue{Value: &pb.TypedValue_UintVal{UintVal: v}}
}

func strVal(v string) *pb.TypedValue {
	return &pb.TypedValue{Value: &pb.TypedValue_StringVal{StringVal: v}}
}

func statePrefix(target, iface string) *pb.Path {
	return &pb.Path{Target: target, Elem: []*pb.PathElem{
		{Name: "interfaces"}, {Name: "interface", Key: map[string]string{"name": iface}}, {Name: "state"},
	}}
}

func countersPrefix(target, iface string) *pb.Path {
	p := statePrefix(target, iface)
	p.Elem = append(p.Elem, &pb.PathElem{Name: "counters"})
	return p
}

func queuePrefix(target, iface, queue string) *pb.Path {
	return &pb.Path{Target: target, Elem: []*pb.PathElem{
		{Name: "qos"}, {Name: "interfaces"}, {Name: "interface", Key: map[string]string{"interface-id": iface}},
		{Name: "output"}, {Name: "queues"}, {Name: "queue", Key: map[string]string{"name": queue}}, {Name: "state"},
	}}
}
