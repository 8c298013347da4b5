package transport

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/multiplane/multiplane/fabricsim/userspace"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/transport/internal/wire"
)

// logRecorder is a slog.Handler that keeps every record (and passes it on),
// so tests assert on messages and fields rather than on text.
type logRecorder struct {
	mu   *sync.Mutex
	recs *[]slog.Record
	next slog.Handler
}

func newLogRecorder(t *testing.T) (*logRecorder, *slog.Logger) {
	h := &logRecorder{mu: new(sync.Mutex), recs: new([]slog.Record), next: testenv.Logger(t).Handler()}
	return h, slog.New(h)
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecorder) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	*h.recs = append(*h.recs, r.Clone())
	h.mu.Unlock()
	return h.next.Handle(ctx, r)
}

func (h *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &logRecorder{mu: h.mu, recs: h.recs, next: h.next.WithAttrs(as)}
}

func (h *logRecorder) WithGroup(name string) slog.Handler {
	return &logRecorder{mu: h.mu, recs: h.recs, next: h.next.WithGroup(name)}
}

// find returns the fields of every record with message msg.
func (h *logRecorder) find(msg string) []map[string]slog.Value {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]slog.Value
	for _, r := range *h.recs {
		if r.Message != msg {
			continue
		}
		f := map[string]slog.Value{"level": slog.StringValue(r.Level.String())}
		r.Attrs(func(a slog.Attr) bool {
			f[a.Key] = a.Value.Resolve()
			return true
		})
		out = append(out, f)
	}
	return out
}

const msgDatagramMismatch = "datagram sizes differ between the ends; using the smaller"

// TestDatagramSizeAgreed: the two ends send datagrams of at most the
// smaller of their MaxDatagramSize, agreed in the handshake, in both
// directions. On a fabric that carries only 1472-byte datagrams (MTU 1500)
// a 9000-MTU end talking to a 1500-MTU end loses nothing to oversize
// datagrams; two 9000-MTU ends use jumbo datagrams. A mismatch is warned
// about once per peer on each end, with the sizes as fields.
func TestDatagramSizeAgreed(t *testing.T) {
	cases := []struct {
		name         string
		dialer, acc  ByteCount
		fabricMax    int // largest datagram the fabric relays (0: jumbo)
		want         ByteCount
		wantMismatch bool
	}{
		{"dialer 9000, acceptor 1500", 8972, 1472, 1472, 1472, true},
		{"dialer 1500, acceptor 9000", 1472, 8972, 1472, 1472, true},
		{"both 9000", 8972, 8972, 0, 8972, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			recA, logA := newLogRecorder(t)
			recB, logB := newLogRecorder(t)
			fp := startFabricWith(t, userspace.Config{MaxDatagram: tc.fabricMax}, planesOf(2, userspace.PlaneConfig{RateBps: 200e6}),
				Config{MaxDatagramSize: tc.dialer, PollMode: PollBlocking, Logger: logA},
				Config{MaxDatagramSize: tc.acc, PollMode: PollBlocking, Logger: logB})
			ctx, cancel := context.WithTimeout(testenv.Context(t), 30*time.Second)
			defer cancel()
			// Second connection to the same peer: the warning is per peer.
			x, y := pair(t, ctx, fp.a, fp.b, fp.ca.RemoteAddrs())
			transfer(t, ctx, fp.ca, fp.cb, 30, 64<<10, 4)
			transfer(t, ctx, fp.cb, fp.ca, 30, 64<<10, 4)
			transfer(t, ctx, x, y, 5, 64<<10, 1)
			for _, c := range []*Conn{fp.ca, fp.cb, x, y} {
				if got := c.Stats().DatagramSize; got != tc.want {
					t.Errorf("connection %d (accepted %v): datagram size %d, want %d", c.ID(), c.accepted, got, tc.want)
				}
			}
			for p := 0; p < fp.f.Planes(); p++ {
				if d := fp.f.Stats(p).Drops.Unroutable; d != 0 {
					t.Errorf("plane %d dropped %d oversize datagrams", p, d)
				}
			}
			if ga, gb := fp.a.Stats().Garbage, fp.b.Stats().Garbage; ga != 0 || gb != 0 {
				t.Errorf("garbage datagrams: %d, %d", ga, gb)
			}
			// Full chunks dominate 64 KiB messages: the mean data datagram
			// sits just under the agreed size, above 1472 only with jumbo.
			for _, c := range []*Conn{fp.ca, fp.cb} {
				st := c.Stats()
				mean := ByteCount(st.BytesSent / max(st.PacketsSent, 1))
				if mean > tc.want || mean < tc.want*3/4 {
					t.Errorf("connection %d: mean data datagram %d bytes for an agreed %d", c.ID(), mean, tc.want)
				}
			}
			for side, rec := range map[string]*logRecorder{"dialer": recA, "acceptor": recB} {
				warns := rec.find(msgDatagramMismatch)
				if !tc.wantMismatch {
					if len(warns) != 0 {
						t.Errorf("%s warned about equal datagram sizes: %v", side, warns)
					}
					continue
				}
				if len(warns) != 1 {
					t.Fatalf("%s: %d datagram mismatch warnings for one peer, want 1", side, len(warns))
				}
				w := warns[0]
				if w["level"].String() != "WARN" || w["datagram_size"].Int64() != int64(tc.want) ||
					w["local_max_datagram"].Int64()+w["peer_max_datagram"].Int64() != int64(tc.dialer+tc.acc) {
					t.Errorf("%s warning fields: %v", side, w)
				}
			}
			if est := recA.find("connection established"); len(est) != 2 || est[0]["datagram_size"].Int64() != int64(tc.want) {
				t.Errorf("dialer logged %d established connections (%v), want 2 with datagram_size %d", len(est), est, tc.want)
			}
		})
	}
}

// TestAcksFitTheAgreedDatagram: an ACK for many paths is cut to the
// agreed datagram size, so an end with the smallest allowed datagrams
// (512 bytes) accepts every ACK of a peer that allows more.
func TestAcksFitTheAgreedDatagram(t *testing.T) {
	ctx := testenv.Context(t)
	ps := PathSet{Planes: []PlanePaths{{Plane: 0, Weight: 1, Entropy: 16}, {Plane: 1, Weight: 1, Entropy: 16}}}
	a := listenT(t, Config{Local: loopbackAddrs(2), MaxDatagramSize: 512, PathSet: &ps, PollMode: PollBlocking})
	b := listenT(t, Config{Local: loopbackAddrs(2), PollMode: PollBlocking})
	ca, cb := pair(t, ctx, a, b, b.LocalAddrs())
	transfer(t, ctx, ca, cb, 40, 64<<10, 8)
	if got := cb.Stats().DatagramSize; got != 512 {
		t.Fatalf("acceptor's datagram size %d, want 512", got)
	}
	if g := a.Stats().Garbage; g != 0 {
		t.Fatalf("the 512-byte end dropped %d datagrams of its peer as garbage", g)
	}
}

// TestDataBeforeInitAckIsNotPlaced: DATA from the acceptor that overtakes
// its INIT_ACK is cut for the agreed datagram size, which the dialer does
// not know yet; it is left unacknowledged (so resent), not placed with the
// wrong chunk size and taken for a protocol violation.
func TestDataBeforeInitAckIsNotPlaced(t *testing.T) {
	tr := listenT(t, Config{Local: loopbackAddrs(1), MaxDatagramSize: 8972})
	c := newConn(tr, ModeMultipath, false)
	chunk := wire.MaxDataPayload(1472) // the acceptor's chunk, agreed at 1472
	d := wire.Data{MessageID: 0, Chunk: 1, TotalLength: 64 << 10, Payload: make([]byte, chunk)}
	now := time.Now()
	c.mu.Lock()
	c.onData(now, now, 0, &d, false)
	perr, acks := c.protoErr, len(c.ackList)
	c.mu.Unlock()
	if perr != nil || acks != 0 {
		t.Fatalf("DATA before the INIT_ACK: protocol error %v, %d paths to acknowledge; want neither", perr, acks)
	}
}
