package agent

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/kv/kvtest"
)

// recorder is an Applier that records what it is given.
type recorder struct {
	mu      sync.Mutex
	applied []contract.EndpointDoc
	fail    error // returned by Apply when set
}

func (r *recorder) Apply(doc contract.EndpointDoc) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.applied = append(r.applied, doc)
	return nil
}

func (r *recorder) Stats() []contract.PathStatus {
	return []contract.PathStatus{{Plane: "p0", TxBytes: 10, RxBytes: 20, Retransmits: 1}}
}

// generations lists the generations applied, in order.
func (r *recorder) generations() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]uint64, len(r.applied))
	for i, d := range r.applied {
		out[i] = d.Generation
	}
	return out
}

func (r *recorder) last() uint64 {
	g := r.generations()
	if len(g) == 0 {
		return 0
	}
	return g[len(g)-1]
}

// doc returns a valid 4-plane document for endpoint at gen.
func doc(endpoint string, gen uint64) contract.EndpointSpec {
	d := contract.EndpointSpec{Schema: contract.SchemaVersion, Generation: gen, Endpoint: endpoint, Class: "default",
		Entropy: 4, DegradedLinkFactor: 0.5}
	for i := 0; i < 4; i++ {
		d.Ports = append(d.Ports, contract.SpecPort{Plane: fmt.Sprintf("p%d", i), Index: i, Address: fmt.Sprintf("10.77.%d.1", i)})
	}
	return d
}

// healthy lists n healthy planes.
func healthy(n int) []contract.PlaneStatus {
	var ps []contract.PlaneStatus
	for i := range n {
		ps = append(ps, contract.PlaneStatus{Name: fmt.Sprintf("p%d", i), Index: i, State: "healthy", CapacityRatio: 1})
	}
	return ps
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// putDoc writes an endpoint document and returns its revision.
func putDoc(t testing.TB, cli *clientv3.Client, d contract.EndpointSpec) int64 {
	t.Helper()
	return putRaw(t, cli, contract.KeyEndpoint(d.Endpoint), mustJSON(t, d))
}

// putGen writes the generation key of gen with 4 healthy planes
// unchanged since generation 1, naming no endpoint as changed.
func putGen(t testing.TB, cli *clientv3.Client, gen uint64) int64 {
	t.Helper()
	return putGenDoc(t, cli, contract.GenerationDoc{Generation: gen, PlanesGeneration: 1, Planes: healthy(4)})
}

func putGenDoc(t testing.TB, cli *clientv3.Client, g contract.GenerationDoc) int64 {
	t.Helper()
	g.Schema, g.ComputedAt, g.Leader = contract.SchemaVersion, time.Now(), "test"
	return putRaw(t, cli, contract.KeyGeneration, mustJSON(t, g))
}

func putRaw(t testing.TB, cli *clientv3.Client, key, value string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Put(ctx, key, value)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return resp.Header.Revision
}

// start runs a in the background until the test ends or stop is called.
func start(t testing.TB, a *Agent) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("agent %s did not stop", a.Endpoint())
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func newAgent(t testing.TB, cfg Config, ap Applier) *Agent {
	t.Helper()
	if cfg.StatusInterval == 0 {
		cfg.StatusInterval = 200 * time.Millisecond
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 2 * time.Second
	}
	a, err := New(cfg, ap, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// getStatus reads the agent's status from etcd; ok is false when absent.
func getStatus(t testing.TB, cli *clientv3.Client, name string) (contract.StatusDoc, int64, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, contract.KeyStatus(name))
	if err != nil {
		t.Fatal(err)
	}
	var s contract.StatusDoc
	if len(resp.Kvs) == 0 {
		return s, 0, false
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &s); err != nil {
		t.Fatalf("status: %v", err)
	}
	return s, resp.Kvs[0].Lease, true
}

// cutProxy is a loopback TCP proxy in front of etcd that a test can cut
// (every connection closed, new ones refused) and resume: a real network
// fault between an agent and a running etcd.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
	dials  int // connections accepted
}

func newCutProxy(t testing.TB, targetURL string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: strings.TrimPrefix(targetURL, "http://"), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) URL() string { return "http://" + p.ln.Addr().String() }

// Dials is how many connections the proxy accepted.
func (p *cutProxy) Dials() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dials
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.dials++
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *cutProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// Cut closes every connection and refuses new ones until Resume.
func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

func (p *cutProxy) Resume() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

func newFlagSet() *flag.FlagSet { return flag.NewFlagSet("test", flag.ContinueOnError) }

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// resolved is doc(endpoint, gen) resolved with 4 healthy planes: the
// configuration the agent applies.
func resolved(endpoint string, gen uint64) contract.EndpointDoc {
	return contract.Configuration(doc(endpoint, gen), contract.GenerationDoc{PlanesGeneration: 1, Planes: healthy(4)})
}

// startApplied runs host-a's agent on a fresh etcd holding generation 1
// and waits until it applied it.
func startApplied(t *testing.T) (*clientv3.Client, *Agent, *recorder) {
	t.Helper()
	cli := kvtest.New(t).Client
	rec := &recorder{}
	a := newAgent(t, Config{Endpoint: "host-a", Client: cli, StateDir: t.TempDir(), Planes: 4}, rec)
	putDoc(t, cli, doc("host-a", 1))
	putGen(t, cli, 1)
	start(t, a)
	testutil.WaitFor(t, wait, "generation 1 applied", func() bool { return rec.last() == 1 })
	return cli, a, rec
}
