package evidence

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/internal/testenv"
	itestutil "github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/kv/kvtest"
	"github.com/multiplane/multiplane/planes"
)

// links of hosts a, b, c on planes p0 and p1: address 10.<plane>.0.<host>.
func testLinks() []planes.Link {
	var out []planes.Link
	for h, name := range []string{"a", "b", "c"} {
		for p := range 2 {
			out = append(out, planes.Link{Name: fmt.Sprintf("s%d:%s", p, name), Plane: fmt.Sprintf("p%d", p), Endpoint: name,
				Address: netip.AddrFrom4([4]byte{10, byte(p), 0, byte(h + 1)})})
		}
	}
	return out
}

func status(name string, paths ...contract.PathStatus) contract.StatusDoc {
	return contract.StatusDoc{Schema: contract.SchemaVersion, Endpoint: name, Paths: paths}
}

func TestJudge(t *testing.T) {
	reports := map[string]report{
		// a reaches b on p0; on p1 its data to b waits.
		"a": newReport(status("a",
			contract.PathStatus{Plane: "p0", PeersReachable: 1, Peers: []contract.PeerPath{{Address: "10.0.0.2", Reachable: true}}},
			contract.PathStatus{Plane: "p1", PeersUnreachable: 1, Peers: []contract.PeerPath{{Address: "10.1.0.2"}}})),
		// b only receives (no data of its own waits anywhere), and hears a on p0.
		"b": newReport(status("b", contract.PathStatus{Plane: "p0", PeersReachable: 1, Peers: []contract.PeerPath{{Address: "10.0.0.1", Reachable: true}}})),
		// c reaches b on p1, and claims to reach a there too.
		"c": newReport(status("c", contract.PathStatus{Plane: "p1", PeersReachable: 2, Peers: []contract.PeerPath{
			{Address: "10.1.0.2", Reachable: true}, {Address: "10.1.0.1", Reachable: true}}})),
	}
	vouch := map[vouchKey]int{}
	for _, r := range reports {
		r.vouches(func(k vouchKey) { vouch[k]++ })
	}
	got := Judge(testLinks(), reports, vouch)
	want := map[string]string{
		"s0:a": "up: a reaches 1 peer on p0",
		"s1:a": "down: a reaches none of the 1 peer it sends to on p1", // its own word wins over c's
		"s0:b": "up: b reaches 1 peer on p0",
		"s1:b": "up: b reached on p1 by 1 endpoint",
		"s1:c": "up: c reaches 2 peers on p1",
		// s0:c: c says nothing of p0 and nobody reaches it there.
	}
	if len(got) != len(want) {
		t.Errorf("Judge gave %d links, want %d: %+v", len(got), len(want), got)
	}
	for name, w := range want {
		if g := fmt.Sprintf("%s: %s", got[name].State, got[name].Reason); g != w {
			t.Errorf("%s = %q, want %q", name, g, w)
		}
	}
}

// observer records what the watcher hands on.
type observer struct {
	mu   sync.Mutex
	last map[string]planes.LinkEvidence
}

func (o *observer) ObserveEvidence(ev map[string]planes.LinkEvidence) {
	o.mu.Lock()
	o.last = ev
	o.mu.Unlock()
}

func (o *observer) ChangeEvidence(changes map[string]planes.LinkEvidence) {
	o.mu.Lock()
	next := map[string]planes.LinkEvidence{}
	for k, v := range o.last {
		next[k] = v
	}
	for k, v := range changes {
		if v.State == "" {
			delete(next, k)
		} else {
			next[k] = v
		}
	}
	o.last = next
	o.mu.Unlock()
}

func (o *observer) state(link string) planes.LinkState {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last[link].State
}

func (o *observer) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.last)
}

func TestWatcherFollowsStatuses(t *testing.T) {
	ctx, cancel := context.WithCancel(testenv.Context(t))
	s := kvtest.New(t)
	put := func(name string, v any) {
		t.Helper()
		data, _ := json.Marshal(v)
		if s, ok := v.(string); ok {
			data = []byte(s)
		}
		if _, err := s.Client.Put(ctx, contract.KeyStatus(name), string(data)); err != nil {
			t.Fatal(err)
		}
	}
	// A status written before the watcher starts, and one of a name the
	// topology does not know yet.
	put("a", status("a", contract.PathStatus{Plane: "p0", PeersReachable: 2}))
	put("d", status("d", contract.PathStatus{Plane: "p0", PeersReachable: 2}))

	obs := &observer{}
	w := New(s.Client, obs, testenv.Logger(t))
	w.SetTopology(testLinks())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	itestutil.WaitFor(t, 5*time.Second, "a's p0 up from the status read at start", func() bool { return obs.state("s0:a") == planes.LinkUp })

	put("b", status("b", contract.PathStatus{Plane: "p1", PeersUnreachable: 1}))
	itestutil.WaitFor(t, 5*time.Second, "b's p1 down from the watch", func() bool { return obs.state("s1:b") == planes.LinkDown })

	// Garbage, another endpoint's name and a newer schema are counted and
	// take the agent's evidence away.
	for i, bad := range []any{"{not json", status("c", contract.PathStatus{Plane: "p1", PeersReachable: 1}),
		contract.StatusDoc{Schema: "3.0", Endpoint: "b", Paths: []contract.PathStatus{{Plane: "p1", PeersReachable: 1}}}} {
		put("b", status("b", contract.PathStatus{Plane: "p1", PeersUnreachable: 1}))
		itestutil.WaitFor(t, 5*time.Second, "b's p1 down", func() bool { return obs.state("s1:b") == planes.LinkDown })
		put("b", bad)
		itestutil.WaitFor(t, 5*time.Second, "b's evidence gone", func() bool { return obs.state("s1:b") == "" })
		if n := testutil.ToFloat64(w.Collector()); n != float64(i+1) {
			t.Fatalf("invalid statuses counted %v, want %d", n, i+1)
		}
	}

	// The status goes with the agent's lease: so does the evidence.
	if _, err := s.Client.Delete(ctx, contract.KeyStatus("a")); err != nil {
		t.Fatal(err)
	}
	itestutil.WaitFor(t, 5*time.Second, "no evidence left", func() bool { return obs.count() == 0 })

	// d joins the topology: its status, written long ago, is read again.
	w.SetTopology(append(testLinks(), planes.Link{Name: "s0:d", Plane: "p0", Endpoint: "d", Address: netip.MustParseAddr("10.0.0.4")}))
	itestutil.WaitFor(t, 5*time.Second, "d's p0 up once in the topology", func() bool { return obs.state("s0:d") == planes.LinkUp })
}

// warnings counts the Warn records a logger got.
type warnings struct {
	mu sync.Mutex
	n  int
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn {
		w.mu.Lock()
		w.n++
		w.mu.Unlock()
	}
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }
func (w *warnings) count() int                         { w.mu.Lock(); defer w.mu.Unlock(); return w.n }

// An agent rewriting the same bad status is logged once; a new reason
// again.
func TestWatcherLogsARefusalOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(testenv.Context(t))
	s := kvtest.New(t)
	warn := &warnings{}
	w := New(s.Client, &observer{}, slog.New(warn))
	w.SetTopology(testLinks())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	for i, bad := range []string{"{", "{", "{", `{"schema":"9.0","endpoint":"a"}`, `{"schema":"9.0","endpoint":"a"}`} {
		if _, err := s.Client.Put(ctx, contract.KeyStatus("a"), bad); err != nil {
			t.Fatal(err)
		}
		itestutil.WaitFor(t, 5*time.Second, "the status refused", func() bool { return testutil.ToFloat64(w.Collector()) == float64(i+1) })
	}
	if n := warn.count(); n != 2 {
		t.Fatalf("%d warnings for 5 refusals of 2 reasons, want 2", n)
	}
}

// Judging only what changed gives what judging everything gives, and a
// status hands on the links it concerns, not the fabric's.
func TestJudgingWhatChangedMatchesJudgingAll(t *testing.T) {
	const hosts, nplanes = 40, 4
	var links []planes.Link
	for h := range hosts {
		for p := range nplanes {
			links = append(links, planes.Link{Name: fmt.Sprintf("s%d:h%d", p, h), Plane: fmt.Sprintf("p%d", p),
				Endpoint: fmt.Sprintf("h%d", h), Address: netip.AddrFrom4([4]byte{10, byte(p), 0, byte(h + 1)})})
		}
	}
	obs := &observer{}
	w := New(nil, obs, nil)
	w.SetTopology(links)
	rng := rand.New(rand.NewPCG(1, 2))
	handOn := func() int {
		ev, all := w.judge()
		if all {
			obs.ObserveEvidence(ev)
		} else {
			obs.ChangeEvidence(ev)
		}
		return len(ev)
	}
	handOn()
	for step := range 400 {
		name := fmt.Sprintf("h%d", rng.IntN(hosts))
		w.mu.Lock()
		if rng.IntN(6) == 0 {
			w.setLocked(name, nil) // the agent's lease ended
		} else {
			var paths []contract.PathStatus
			for p := range nplanes {
				ps := contract.PathStatus{Plane: fmt.Sprintf("p%d", p)}
				for range rng.IntN(3) {
					peer := rng.IntN(hosts)
					reach := rng.IntN(3) > 0
					ps.Peers = append(ps.Peers, contract.PeerPath{Address: fmt.Sprintf("10.%d.0.%d", p, peer+1), Reachable: reach})
					if reach {
						ps.PeersReachable++
					} else {
						ps.PeersUnreachable++
					}
				}
				paths = append(paths, ps)
			}
			w.setLocked(name, newReport(status(name, paths...)))
		}
		w.mu.Unlock()
		n := handOn()
		// One endpoint's links, and those of the peers it vouches for.
		if limit := nplanes + 2*nplanes*2; n > limit {
			t.Fatalf("step %d: one status handed on %d links, want at most %d", step, n, limit)
		}
		w.mu.Lock()
		want := Judge(links, w.reports, w.vouch)
		w.mu.Unlock()
		obs.mu.Lock()
		got := obs.last
		obs.mu.Unlock()
		if len(got) != len(want) {
			t.Fatalf("step %d: %d links have evidence, judging all gives %d", step, len(got), len(want))
		}
		for name, e := range want {
			if g := got[name]; g.State != e.State || g.Reason != e.Reason {
				t.Fatalf("step %d: %s = %s %q, judging all gives %s %q", step, name, g.State, g.Reason, e.State, e.Reason)
			}
		}
	}
}
