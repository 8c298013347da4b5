package kv

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Gate refuses the embedded etcd to client certificates that fabricd has
// revoked, at once: etcd checks a deleted user's permissions only when a
// request or a watch starts, so a watch opened before the revocation would
// go on delivering. The gate refuses every new request of a revoked
// certificate and ends the streams (watches, lease keep-alives) it has
// open. Certificates are known by serial number (hex).
type Gate struct {
	mu      sync.Mutex
	revoked map[string]bool
	streams map[string]map[*gatedStream]struct{} // by serial
}

// NewGate returns a gate that refuses no one.
func NewGate() *Gate {
	return &Gate{revoked: map[string]bool{}, streams: map[string]map[*gatedStream]struct{}{}}
}

// Revoke refuses the certificates with these serials from now on and ends
// their open streams.
func (g *Gate) Revoke(serials ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range serials {
		g.revoked[s] = true
		for st := range g.streams[s] {
			st.cancel()
		}
		delete(g.streams, s)
	}
}

// Revoked reports whether the serial was revoked.
func (g *Gate) Revoked(serial string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.revoked[serial]
}

var errRevoked = status.Error(codes.PermissionDenied, "etcdserver: permission denied: client certificate revoked")

// clientSerial is the serial of the verified client certificate of ctx's
// peer, "" when there is none.
func clientSerial(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return ""
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return ""
	}
	for _, chain := range info.State.VerifiedChains {
		if len(chain) > 0 {
			return chain[0].SerialNumber.Text(16) // as pki.Serial
		}
	}
	return ""
}

// ServerOptions are the gRPC options that install the gate.
func (g *Gate) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.unary), grpc.ChainStreamInterceptor(g.stream)}
}

func (g *Gate) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if s := clientSerial(ctx); s != "" && g.Revoked(s) {
		return nil, errRevoked
	}
	return h(ctx, req)
}

func (g *Gate) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	s := clientSerial(ss.Context())
	if s == "" {
		return h(srv, ss)
	}
	ctx, cancel := context.WithCancel(ss.Context())
	st := &gatedStream{ServerStream: ss, ctx: ctx, cancel: cancel}
	g.mu.Lock()
	if g.revoked[s] {
		g.mu.Unlock()
		cancel()
		return errRevoked
	}
	if g.streams[s] == nil {
		g.streams[s] = map[*gatedStream]struct{}{}
	}
	g.streams[s][st] = struct{}{}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.streams[s], st)
		if len(g.streams[s]) == 0 {
			delete(g.streams, s)
		}
		g.mu.Unlock()
		cancel()
	}()
	err := h(srv, st)
	if ctx.Err() != nil && ss.Context().Err() == nil {
		return errRevoked
	}
	return err
}

// gatedStream is a stream whose context the gate can end: etcd's watch
// and lease handlers return when it is done.
type gatedStream struct {
	grpc.ServerStream
	ctx    context.Context
	cancel context.CancelFunc
}

func (s *gatedStream) Context() context.Context { return s.ctx }
