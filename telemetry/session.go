package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/openconfig/gnmi/proto/gnmi"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/multiplane/multiplane/planes"
)

var (
	errSilent         = errors.New("telemetry: stream silent")
	errConnectTimeout = errors.New("telemetry: no response within the connect timeout")
)

// session is the stream of one switch: connect, subscribe, receive, and
// reconnect with backoff, until stopped.
type session struct {
	c      *Collector
	spec   switchSpec
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}

	expected atomic.Pointer[[]string] // set by Reconcile, read by the stream

	mu         sync.Mutex
	st         SwitchStatus
	lastUpdate atomic.Int64
	updates    atomic.Uint64
	reconnects atomic.Uint64

	mUpdates, mReconnects prometheus.Counter
	mConnected, mSynced   prometheus.Gauge
}

func (c *Collector) start(spec switchSpec) *session {
	ctx, cancel := context.WithCancel(c.runCtx)
	s := &session{c: c, spec: spec, cancel: cancel, done: make(chan struct{}),
		log:      c.log.With("switch", spec.name, "address", spec.target.Address),
		st:       SwitchStatus{Switch: spec.name, Address: spec.target.Address, Reason: "connecting", Interfaces: len(spec.ifaces)},
		mUpdates: c.m.updates.WithLabelValues(spec.name), mReconnects: c.m.reconnects.WithLabelValues(spec.name),
		mConnected: c.m.connected.WithLabelValues(spec.name), mSynced: c.m.synced.WithLabelValues(spec.name)}
	ifs := spec.ifaces
	s.expected.Store(&ifs)
	s.mConnected.Set(0)
	s.mSynced.Set(0)
	go s.run(ctx)
	return s
}

func (s *session) stop() {
	s.cancel()
	<-s.done
}

func (s *session) setExpected(spec switchSpec) {
	ifs := spec.ifaces
	s.expected.Store(&ifs)
	s.mu.Lock()
	s.spec.ifaces = spec.ifaces
	s.st.Interfaces = len(spec.ifaces)
	s.mu.Unlock()
}

// Status returns the switch's current status.
func (s *session) Status() SwitchStatus {
	s.mu.Lock()
	st := s.st
	s.mu.Unlock()
	if t := s.lastUpdate.Load(); t != 0 {
		st.LastUpdate = time.Unix(0, t)
	}
	st.Updates = s.updates.Load()
	st.Reconnects = s.reconnects.Load()
	return st
}

// setState records a reachability change and tells the observer; no change,
// no call.
func (s *session) setState(reachable, synced bool, reason string) {
	now := time.Now()
	s.mu.Lock()
	changed := s.st.Since.IsZero() || s.st.Reachable != reachable || s.st.Synced != synced
	if changed {
		s.st.Reachable, s.st.Synced, s.st.Since, s.st.Reason = reachable, synced, now, reason
	}
	s.mu.Unlock()
	if !changed {
		return
	}
	s.mConnected.Set(b2f(reachable))
	s.mSynced.Set(b2f(synced))
	s.c.obs.ObserveSwitch(planes.SwitchReachability{Switch: s.spec.name, Reachable: reachable, Synced: synced, At: now, Reason: reason})
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (s *session) run(ctx context.Context) {
	defer close(s.done)
	cfg := s.c.cfg
	p := newProcessor(s.spec.name, *s.expected.Load(), cfg.MaxRate, procMetrics{
		typeMismatch: s.c.m.errors.WithLabelValues(ErrKindTypeMismatch),
		stale:        s.c.m.errors.WithLabelValues(ErrKindStale),
		reset:        s.c.m.errors.WithLabelValues(ErrKindCounterReset),
	}, s.log)
	attempt := 0
	wasDown := false
	for {
		began := time.Now()
		synced, kind, err := s.stream(ctx, p)
		if ctx.Err() != nil {
			return
		}
		if synced && time.Since(began) >= cfg.SilenceTimeout {
			// A stream that got going starts the backoff over; one that
			// ends right after syncing keeps backing off.
			attempt = 0
		}
		s.c.m.errors.WithLabelValues(kind).Inc()
		reason := describe(kind, err, cfg.SilenceTimeout)
		attrs := []any{"reason", reason}
		if errors.Is(err, ErrCredentials) {
			attrs = append(attrs, "detail", err.Error())
		}
		if !wasDown || synced {
			s.log.Warn("gnmi stream down", attrs...)
		} else {
			s.log.Debug("gnmi stream still down", attrs...)
		}
		wasDown = true
		s.setState(false, false, reason)
		d := backoff(attempt, cfg.BackoffMin, cfg.BackoffMax, rand.Float64())
		attempt++
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		s.reconnects.Add(1)
		s.mReconnects.Inc()
	}
}

func describe(kind string, err error, silence time.Duration) string {
	switch {
	case errors.Is(err, ErrCredentials):
		// Shown to every viewer: no variable names, paths or file contents.
		// The log has the detail.
		return kind + ": fabricd could not load its credentials for this switch; see its log"
	case kind == ErrKindSilent:
		return fmt.Sprintf("silent: nothing received for %v", silence)
	case errors.Is(err, io.EOF):
		return kind + ": stream closed by target"
	}
	if st, ok := status.FromError(err); ok {
		return bounded(fmt.Sprintf("%s: %s: %s", kind, st.Code(), st.Message()))
	}
	return bounded(kind + ": " + err.Error())
}

// maxReason bounds a reason: a switch chooses its error messages.
const maxReason = 256

func bounded(reason string) string { return planes.Shown(reason, maxReason) }

// stream runs one Subscribe RPC until it fails or ctx ends. It returns
// whether the stream synced, and the error kind and error it ended with.
func (s *session) stream(ctx context.Context, p *processor) (synced bool, kind string, err error) {
	cfg := s.c.cfg
	t := s.spec.target
	creds, err := transportCreds(t)
	if err != nil {
		return false, ErrKindAuth, err
	}
	pw, err := password(t)
	if err != nil {
		return false, ErrKindAuth, err
	}
	conn, err := grpc.NewClient(t.Address, creds,
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: cfg.KeepaliveTime, Timeout: cfg.KeepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return false, ErrKindConnect, err
	}
	defer conn.Close()

	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var first atomic.Bool
	watchdog := time.AfterFunc(cfg.ConnectTimeout, func() {
		if first.Load() {
			cancel(errSilent)
		} else {
			cancel(errConnectTimeout)
		}
	})
	defer watchdog.Stop()
	if t.Username != "" {
		sctx = metadata.AppendToOutgoingContext(sctx, "username", t.Username, "password", pw)
	}
	stream, err := conn.NewStream(sctx, &pb.GNMI_ServiceDesc.Streams[0], "/gnmi.gNMI/Subscribe", grpc.ForceCodecV2(codec{}))
	if err != nil {
		return false, ErrKindConnect, causeOr(sctx, err)
	}
	if err := stream.SendMsg(s.request()); err != nil {
		if errors.Is(err, io.EOF) {
			// The target ended the stream (a refused login, say): gRPC gives
			// its status to RecvMsg, not to SendMsg.
			err = stream.RecvMsg(&frame{})
		}
		return false, ErrKindConnect, causeOr(sctx, err)
	}
	p.resetBaselines()
	expected := s.expected.Load()
	f := &frame{}
	for {
		if err := stream.RecvMsg(f); err != nil {
			err = causeOr(sctx, err)
			switch {
			case errors.Is(err, errSilent):
				return synced, ErrKindSilent, err
			case !first.Load():
				return synced, ErrKindConnect, err
			}
			return synced, ErrKindStream, err
		}
		watchdog.Reset(cfg.SilenceTimeout)
		s.lastUpdate.Store(time.Now().UnixNano())
		if !first.Load() {
			first.Store(true)
			s.log.Info("gnmi stream up")
			s.setState(true, false, "stream up")
		}
		if err := f.decode(); err != nil {
			return synced, ErrKindStream, err
		}
		if e := s.expected.Load(); e != expected {
			expected = e
			p.setExpected(*e)
		}
		switch {
		case f.isUpdate:
			n := f.notif.updateCount
			s.updates.Add(uint64(n))
			s.mUpdates.Add(float64(n))
			if batch := p.process(&f.notif); len(batch) > 0 {
				s.c.obs.ObserveInterfaces(batch)
				s.c.m.samples.Add(float64(len(batch)))
				s.c.m.batches.Inc()
			}
		case f.sync && !synced:
			synced = true
			s.log.Info("gnmi stream synced")
			if m := p.missing(); len(m) > 0 {
				s.log.Warn("interfaces in the topology without oper-status from the switch", "count", len(m), "first", m[:min(len(m), 5)])
			}
			s.setState(true, true, "synced")
		}
	}
}

// causeOr returns why ctx was cancelled if it was, else err.
func causeOr(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		return c
	}
	return err
}

func (s *session) request() *pb.SubscribeRequest {
	cfg := s.c.cfg
	prefix := &pb.Path{}
	if !cfg.NoTarget {
		prefix.Target = s.spec.name
	}
	enc := pb.Encoding_PROTO
	switch cfg.Encoding {
	case "json":
		enc = pb.Encoding_JSON
	case "json_ietf":
		enc = pb.Encoding_JSON_IETF
	}
	iface := func(rest ...string) *pb.Path {
		p := &pb.Path{Elem: []*pb.PathElem{{Name: "interfaces"}, {Name: "interface", Key: map[string]string{"name": "*"}}}}
		for _, r := range rest {
			p.Elem = append(p.Elem, &pb.PathElem{Name: r})
		}
		return p
	}
	queues := &pb.Path{Elem: []*pb.PathElem{
		{Name: "qos"}, {Name: "interfaces"}, {Name: "interface", Key: map[string]string{"interface-id": "*"}},
		{Name: "output"}, {Name: "queues"}, {Name: "queue", Key: map[string]string{"name": "*"}}, {Name: "state"},
	}}
	every := uint64(cfg.SampleInterval)
	return &pb.SubscribeRequest{Request: &pb.SubscribeRequest_Subscribe{Subscribe: &pb.SubscriptionList{
		Prefix: prefix, Mode: pb.SubscriptionList_STREAM, Encoding: enc,
		Subscription: []*pb.Subscription{
			// A heartbeat keeps an idle stream from looking dead to targets that
			// honour it (OpenConfig's reference server streams counters anyway).
			{Path: iface("state", "oper-status"), Mode: pb.SubscriptionMode_ON_CHANGE, HeartbeatInterval: uint64(cfg.SilenceTimeout / 2)},
			{Path: iface("state", "counters"), Mode: pb.SubscriptionMode_SAMPLE, SampleInterval: every},
			{Path: queues, Mode: pb.SubscriptionMode_SAMPLE, SampleInterval: every},
		},
	}}}
}
