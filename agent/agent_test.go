package agent

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/kv"
	"github.com/multiplane/multiplane/kv/kvtest"
)

const wait = 20 * time.Second

// A leader that dies between its transactions leaves a document ahead of
// the generation key: the agent holds its configuration until a later
// generation completes.
func TestAppliesOnlyCompleteGenerations(t *testing.T) {
	cli, a, rec := startApplied(t)

	// Leader writes the document of generation 2, then dies before the
	// generation key.
	rev := putDoc(t, cli, doc("host-a", 2))
	testutil.WaitFor(t, wait, "the agent to see the document of generation 2", func() bool { return a.docRev.Load() >= rev })
	if got := rec.generations(); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("applied %v with the generation key at 1, want only [1]", got)
	}
	if st := a.Status(); st.AppliedGeneration != 1 {
		t.Fatalf("status says generation %d applied, want 1", st.AppliedGeneration)
	}

	// A new leader completes generation 3; this endpoint's document did not
	// change since 2, so it is the one now complete.
	putGen(t, cli, 3)
	testutil.WaitFor(t, wait, "generation 2 applied", func() bool { return rec.last() == 2 })

	// The generation key moving on with the same document is a no-op.
	rev = putGen(t, cli, 4)
	testutil.WaitFor(t, wait, "the agent to see generation 4", func() bool { return a.genRev.Load() >= rev })
	putDoc(t, cli, doc("host-a", 5))
	putGen(t, cli, 5)
	testutil.WaitFor(t, wait, "generation 5 applied", func() bool { return rec.last() == 5 })
	if got := rec.generations(); !slices.Equal(got, []uint64{1, 2, 5}) {
		t.Fatalf("applied %v, want [1 2 5]", got)
	}
}

func TestRejectsInvalidDocumentAndKeepsTheLastGood(t *testing.T) {
	cli, a, rec := startApplied(t)

	bad := map[string]func() string{
		"link state": func() string {
			d := doc("host-a", 2)
			d.Ports[0].Link = "flapping"
			return mustJSON(t, d)
		},
		"other endpoint": func() string { return mustJSON(t, doc("host-b", 3)) },
		"plane out of range": func() string {
			d := doc("host-a", 4)
			d.Ports[3].Index = 7
			return mustJSON(t, d)
		},
		"not json": func() string { return `{"generation": 5, "endpoint": "host-a", "path_set":` },
		"newer schema major": func() string {
			d := doc("host-a", 6)
			d.Schema = "3.0"
			return mustJSON(t, d)
		},
	}
	gen := uint64(10)
	for name, value := range bad {
		t.Run(name, func(t *testing.T) {
			gen++
			rev := putRaw(t, cli, contract.KeyEndpoint("host-a"), value())
			putGen(t, cli, gen)
			testutil.WaitFor(t, wait, "the rejection in the status in etcd", func() bool {
				st, _, ok := getStatus(t, cli, "host-a")
				return ok && a.docRev.Load() >= rev && len(st.Errors) > 0 && strings.Contains(st.Errors[0], "rejected")
			})
			st := a.Status()
			if st.AppliedGeneration != 1 || rec.last() != 1 {
				t.Fatalf("applied %v, status generation %d: want 1 kept", rec.generations(), st.AppliedGeneration)
			}
			if !strings.Contains(strings.Join(st.Errors, ";"), contract.ErrInvalidDocument.Error()) {
				t.Fatalf("status errors %q do not say the document is invalid", st.Errors)
			}
		})
	}

	putDoc(t, cli, doc("host-a", 20))
	putGen(t, cli, 20)
	testutil.WaitFor(t, wait, "generation 20 applied with no error left", func() bool {
		st, _, ok := getStatus(t, cli, "host-a")
		return ok && st.AppliedGeneration == 20 && len(st.Errors) == 0
	})
	if got := rec.generations(); !slices.Equal(got, []uint64{1, 20}) {
		t.Fatalf("applied %v, want [1 20]", got)
	}
}

// A newer minor schema version adds fields the agent ignores; a newer
// major in the generation key holds every document back.
func TestSchemaVersions(t *testing.T) {
	s := kvtest.New(t)
	cli := s.Client
	rec := &recorder{}
	a := newAgent(t, Config{Endpoint: "host-a", Client: cli, StateDir: t.TempDir(), Planes: 4}, rec)
	d := doc("host-a", 1)
	d.Schema = "2.7"
	v := mustJSON(t, d)
	putRaw(t, cli, contract.KeyEndpoint("host-a"), v[:len(v)-1]+`,"added_in_2_7":{"x":1}}`)
	g := mustJSON(t, contract.GenerationDoc{Schema: "2.7", Generation: 1, PlanesGeneration: 1, Planes: healthy(4)})
	putRaw(t, cli, contract.KeyGeneration, g[:len(g)-1]+`,"new_field":true}`)
	start(t, a)
	testutil.WaitFor(t, wait, "generation 1 (schema 2.7) applied", func() bool { return rec.last() == 1 })

	putDoc(t, cli, doc("host-a", 2))
	rev := putRaw(t, cli, contract.KeyGeneration, `{"schema":"3.0","generation":2}`)
	testutil.WaitFor(t, wait, "the refusal in the status in etcd", func() bool {
		st, _, ok := getStatus(t, cli, "host-a")
		return ok && a.genRev.Load() >= rev && strings.Contains(strings.Join(st.Errors, ";"), "schema 3.0 is newer")
	})
	if st := a.Status(); st.AppliedGeneration != 1 || rec.last() != 1 || st.Schema != contract.SchemaVersion {
		t.Fatalf("applied %v, status %+v: want generation 1 kept, schema %s", rec.generations(), st, contract.SchemaVersion)
	}
	putGen(t, cli, 3)
	testutil.WaitFor(t, wait, "generation 2 applied under a 2.x generation key", func() bool { return rec.last() == 2 })
}

func TestApplierFailureKeepsTheLastGood(t *testing.T) {
	s := kvtest.New(t)
	cli := s.Client
	rec := &recorder{}
	a := newAgent(t, Config{Endpoint: "host-a", Client: cli, Planes: 4}, rec)
	putDoc(t, cli, doc("host-a", 1))
	putGen(t, cli, 1)
	start(t, a)
	testutil.WaitFor(t, wait, "generation 1 applied", func() bool { return rec.last() == 1 })

	rec.mu.Lock()
	rec.fail = errors.New("transport: invalid path set: plane 9")
	rec.mu.Unlock()
	putDoc(t, cli, doc("host-a", 2))
	putGen(t, cli, 2)
	testutil.WaitFor(t, wait, "the apply error in the status", func() bool {
		st, _, ok := getStatus(t, cli, "host-a")
		return ok && len(st.Errors) == 1 && strings.Contains(st.Errors[0], "plane 9") && st.AppliedGeneration == 1
	})

	rec.mu.Lock()
	rec.fail = nil
	rec.mu.Unlock()
	putDoc(t, cli, doc("host-a", 3))
	putGen(t, cli, 3)
	testutil.WaitFor(t, wait, "generation 3 applied", func() bool { return rec.last() == 3 && len(a.Status().Errors) == 0 })
}

// The agent's connection to etcd is cut; meanwhile two generations are
// published and the history compacted past the agent's revision. When the
// connection returns, the agent re-reads and applies the latest.
func TestSurvivesCompactionWhileDisconnected(t *testing.T) {
	s := kvtest.New(t)
	cli := s.Client
	proxy := newCutProxy(t, s.Endpoints()[0])
	rec := &recorder{}
	a := newAgent(t, Config{Endpoint: "host-a", EtcdEndpoints: []string{proxy.URL()}, EtcdDialTimeout: time.Second, Planes: 4}, rec)
	putDoc(t, cli, doc("host-a", 1))
	putGen(t, cli, 1)
	start(t, a)
	testutil.WaitFor(t, wait, "generation 1 applied", func() bool { return rec.last() == 1 })
	reads := a.reads.Load()

	proxy.Cut()
	putDoc(t, cli, doc("host-a", 2))
	putGen(t, cli, 2)
	putDoc(t, cli, doc("host-a", 3))
	rev := putGen(t, cli, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	proxy.Resume()

	t0 := time.Now()
	testutil.WaitFor(t, wait, "generation 3 applied after the reconnect", func() bool { return rec.last() == 3 })
	t.Logf("applied the latest generation %v after the connection returned", time.Since(t0).Round(time.Millisecond))
	if got := rec.generations(); !slices.Equal(got, []uint64{1, 3}) {
		t.Fatalf("applied %v, want [1 3]", got)
	}
	if a.reads.Load() <= reads {
		t.Fatal("the agent did not re-read after the compaction")
	}

	// And it keeps following from the new revision.
	putDoc(t, cli, doc("host-a", 4))
	putGen(t, cli, 4)
	testutil.WaitFor(t, wait, "generation 4 applied", func() bool { return rec.last() == 4 })
}

// Credentials replaced while the agent runs (a host enrolled again after a
// revocation: etcd refuses the old certificate on the open connection):
// the agent drops its client and connects again, and keeps following.
func TestRedialsWhenCredentialsReplaced(t *testing.T) {
	s := kvtest.New(t)
	proxy := newCutProxy(t, s.Endpoints()[0])
	rec := &recorder{}
	var mu sync.Mutex
	replaced := make(chan struct{})
	redial := func() <-chan struct{} { mu.Lock(); defer mu.Unlock(); return replaced }
	a := newAgent(t, Config{Endpoint: "host-a", EtcdEndpoints: []string{proxy.URL()}, Planes: 4, Redial: redial}, rec)
	putDoc(t, s.Client, doc("host-a", 1))
	putGen(t, s.Client, 1)
	start(t, a)
	testutil.WaitFor(t, wait, "generation 1 applied", func() bool { return rec.last() == 1 })
	dials := proxy.Dials()

	mu.Lock()
	close(replaced)
	replaced = make(chan struct{})
	mu.Unlock()
	testutil.WaitFor(t, wait, "a new connection to etcd", func() bool { return proxy.Dials() > dials })
	putDoc(t, s.Client, doc("host-a", 2))
	putGen(t, s.Client, 2)
	testutil.WaitFor(t, wait, "generation 2 applied on the new connection", func() bool { return rec.last() == 2 })
	testutil.WaitFor(t, wait, "the status reported again", func() bool {
		st, _, ok := getStatus(t, s.Client, "host-a")
		return ok && st.AppliedGeneration == 2
	})
}

// A cut connection without compaction: the watch resumes from its revision
// and delivers what was written meanwhile.
func TestReconnectDoesNotMissUpdates(t *testing.T) {
	s := kvtest.New(t)
	cli := s.Client
	proxy := newCutProxy(t, s.Endpoints()[0])
	rec := &recorder{}
	a := newAgent(t, Config{Endpoint: "host-a", EtcdEndpoints: []string{proxy.URL()}, EtcdDialTimeout: time.Second, Planes: 4}, rec)
	putDoc(t, cli, doc("host-a", 1))
	putGen(t, cli, 1)
	start(t, a)
	testutil.WaitFor(t, wait, "generation 1 applied", func() bool { return rec.last() == 1 })

	for gen := uint64(2); gen <= 3; gen++ {
		proxy.Cut()
		putDoc(t, cli, doc("host-a", gen))
		putGen(t, cli, gen)
		proxy.Resume()
		testutil.WaitFor(t, wait, "the update written while disconnected", func() bool { return rec.last() == gen })
	}
	if got := rec.generations(); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("applied %v, want [1 2 3]", got)
	}
}

// An agent restarted while etcd is down comes up on its last known good
// document; when etcd returns it follows it again.
func TestRestartsOnLastKnownGoodWithEtcdDown(t *testing.T) {
	ctx := testenv.Context(t)
	etcdDir, stateDir := t.TempDir(), t.TempDir()
	var endpoints []string
	startEtcd := func() (closeEtcd func()) {
		emb, err := kv.StartEmbedded(ctx, etcdDir, kv.EmbeddedOptions{}, testenv.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		endpoints = emb.Endpoints()
		var once sync.Once
		closeEtcd = func() { once.Do(emb.Close) }
		t.Cleanup(closeEtcd)
		return closeEtcd
	}
	closeEtcd := startEtcd()
	cli := newClient(t, endpoints)

	putDoc(t, cli, doc("host-a", 7))
	putGen(t, cli, 7)
	rec := &recorder{}
	cfg := Config{Endpoint: "host-a", EtcdEndpoints: endpoints, EtcdDialTimeout: time.Second, StateDir: stateDir, Planes: 4}
	stop := start(t, newAgent(t, cfg, rec))
	testutil.WaitFor(t, wait, "generation 7 applied", func() bool { return rec.last() == 7 })
	testutil.WaitFor(t, wait, "the last-known-good file", func() bool {
		_, ok, err := loadLKG(LKGPath(stateDir, "host-a"), "host-a", 4)
		return ok && err == nil
	})
	stop()
	closeEtcd()

	rec2 := &recorder{}
	hook := make(chan uint64, 10)
	cfg.OnApplied = func(gen uint64, _ time.Time) { hook <- gen }
	a2 := newAgent(t, cfg, rec2)
	t0 := time.Now()
	stop = start(t, a2)
	testutil.WaitFor(t, wait, "the last-known-good applied with etcd down", func() bool { return rec2.last() == 7 })
	t.Logf("last-known-good applied %v after start, etcd down", time.Since(t0).Round(time.Microsecond))
	if st := a2.Status(); st.Source != SourceLKG || st.AppliedGeneration != 7 {
		t.Fatalf("status %+v, want generation 7 from %s", st, SourceLKG)
	}

	closeEtcd = startEtcd()
	testutil.WaitFor(t, wait, "the status reported once etcd is back", func() bool {
		st, _, ok := getStatus(t, cli, "host-a")
		return ok && st.AppliedGeneration == 7 && st.Source == SourceEtcd
	})
	putDoc(t, cli, doc("host-a", 8))
	putGen(t, cli, 8)
	testutil.WaitFor(t, wait, "generation 8 applied", func() bool { return rec2.last() == 8 })
	if got := rec2.generations(); !slices.Equal(got, []uint64{7, 8}) {
		t.Fatalf("applied %v, want [7 8] (the same generation from etcd is a no-op)", got)
	}
	testutil.WaitFor(t, wait, "OnApplied for 8", func() bool { return len(hook) == 2 })
	if <-hook != 7 || <-hook != 8 {
		t.Fatal("OnApplied was not called once for 7 and once for 8")
	}
	stop()
	closeEtcd()
}

func newClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func TestCorruptLastKnownGoodIsIgnored(t *testing.T) {
	other := resolved("host-b", 3)
	mismatch := resolved("host-a", 3)
	cases := map[string]string{
		"garbage":        "\x00\x01not json",
		"truncated":      `{"generation": 3, "document": {"generation": 3, "endpoint": "host-a", "path_set": {"planes": [`,
		"other endpoint": mustJSON(t, lkgFile{Generation: 3, Document: other}),
		"generation":     mustJSON(t, lkgFile{Generation: 4, Document: mismatch}),
		"invalid":        mustJSON(t, lkgFile{Generation: 1, Document: contract.EndpointDoc{Generation: 1, Endpoint: "host-a"}}),
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(LKGPath(dir, "host-a"), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			rec := &recorder{}
			// etcd is unreachable: nothing but the file could be applied.
			a := newAgent(t, Config{Endpoint: "host-a", EtcdEndpoints: []string{"http://127.0.0.1:1"}, EtcdDialTimeout: 200 * time.Millisecond, StateDir: dir, Planes: 4}, rec)
			start(t, a)
			testutil.WaitFor(t, wait, "the error in the status", func() bool { return len(a.Status().Errors) > 0 })
			st := a.Status()
			if !strings.Contains(st.Errors[0], ErrCorruptLKG.Error()) {
				t.Fatalf("status errors %q", st.Errors)
			}
			if st.AppliedGeneration != 0 || len(rec.generations()) != 0 {
				t.Fatalf("applied %v from a corrupt file", rec.generations())
			}
		})
	}

	t.Run("replaced from etcd", func(t *testing.T) {
		s := kvtest.New(t)
		dir := t.TempDir()
		path := LKGPath(dir, "host-a")
		if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
		putDoc(t, s.Client, doc("host-a", 2))
		putGen(t, s.Client, 2)
		rec := &recorder{}
		a := newAgent(t, Config{Endpoint: "host-a", Client: s.Client, StateDir: dir, Planes: 4}, rec)
		start(t, a)
		testutil.WaitFor(t, wait, "generation 2 applied and saved", func() bool {
			d, ok, err := loadLKG(path, "host-a", 4)
			return err == nil && ok && d.Generation == 2 && len(a.Status().Errors) == 0
		})
		if m, _ := filepath.Glob(filepath.Join(dir, "*.tmp*")); len(m) > 0 {
			t.Fatalf("temporary files left: %v", m)
		}
	})
}

// The status lives under the agent's lease: present while it runs, gone
// when it stops, back when it starts again or when the lease is lost.
func TestStatusUnderLease(t *testing.T) {
	s := kvtest.New(t)
	cli := s.Client
	putDoc(t, cli, doc("host-a", 1))
	putGen(t, cli, 1)
	rec := &recorder{}
	cfg := Config{Endpoint: "host-a", EtcdEndpoints: s.Endpoints(), Planes: 4, Version: "test-1"}
	stop := start(t, newAgent(t, cfg, rec))
	var lease int64
	testutil.WaitFor(t, wait, "the status", func() bool {
		st, l, ok := getStatus(t, cli, "host-a")
		lease = l
		return ok && st.AppliedGeneration == 1
	})
	st, _, _ := getStatus(t, cli, "host-a")
	if st.Source != SourceEtcd || st.Version != "test-1" || len(st.Paths) != 1 || st.Paths[0].TxBytes != 10 || st.AppliedAt.IsZero() || lease == 0 {
		t.Fatalf("status %+v under lease %x", st, lease)
	}

	// The lease is lost (as after etcd was away longer than the TTL): the
	// agent grants a new one and the status comes back.
	ctx := testenv.Context(t)
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(lease)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, wait, "the status under a new lease", func() bool {
		_, l, ok := getStatus(t, cli, "host-a")
		return ok && l != lease
	})

	stop()
	if _, _, ok := getStatus(t, cli, "host-a"); ok {
		t.Fatal("status still present after the agent stopped")
	}

	start(t, newAgent(t, cfg, rec))
	testutil.WaitFor(t, wait, "the status after a restart", func() bool {
		_, _, ok := getStatus(t, cli, "host-a")
		return ok
	})
}

func TestConfigDefaultsAndFlags(t *testing.T) {
	var c Config
	fs := newFlagSet()
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--name", "host-a", "--etcd-endpoints", "http://a:2379, http://b:2379", "--planes", "2", "--addresses", "10.77.0.1,10.77.1.1", "--state-dir", "/tmp/x"}); err != nil {
		t.Fatal(err)
	}
	c, err := c.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Endpoint != "host-a" || !slices.Equal(c.EtcdEndpoints, []string{"http://a:2379", "http://b:2379"}) || c.Planes != 2 || len(c.Addresses) != 2 ||
		c.StatusInterval != DefaultStatusInterval || c.LeaseTTL != DefaultLeaseTTL || c.Version == "" {
		t.Fatalf("config %+v", c)
	}
	for name, bad := range map[string]Config{
		"no etcd":   {Endpoint: "x"},
		"slash":     {Endpoint: "a/b", EtcdEndpoints: []string{"x"}},
		"short ttl": {Endpoint: "a", EtcdEndpoints: []string{"x"}, LeaseTTL: time.Second},
		"addresses": {Endpoint: "a", EtcdEndpoints: []string{"x"}, Planes: 4, Addresses: make([]netip.Addr, 2)},
	} {
		if _, err := bad.withDefaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
}

// The agent applies its document with the planes of one generation only: a
// generation that names no one applies the planes alone; one that changed
// too many to name makes the agent read its document at the generation's
// revision.
func TestAppliesOwnAndSharedDocumentsOfOneGeneration(t *testing.T) {
	cli, a, rec := startApplied(t)

	// Generation 2 takes plane p1 down and this endpoint's link on p0
	// (the orders of delivery: TestOneGenerationWhateverTheOrderOfDelivery).
	planes := healthy(4)
	planes[1].State, planes[1].CapacityRatio = "down", 0
	d := doc("host-a", 2)
	d.Ports[0].Link = "down"
	putDoc(t, cli, d)
	rev := putGenDoc(t, cli, contract.GenerationDoc{Generation: 2, PlanesGeneration: 2, Planes: planes, Changed: []string{"host-a", "host-b"}})
	testutil.WaitFor(t, wait, "generation 2 applied", func() bool { return rec.last() == 2 })
	if got := appliedPlanes(rec); got != "p2 p3" {
		t.Fatalf("generation 2 applied as %q, want p2 p3 (p0's link and plane p1 down)", got)
	}

	// A plane event: the generation key alone.
	rev = putGenDoc(t, cli, contract.GenerationDoc{Generation: 3, PlanesGeneration: 3, Planes: healthy(4)})
	testutil.WaitFor(t, wait, "generation 3 applied", func() bool { return rec.last() == 3 })
	if got := appliedPlanes(rec); got != "p1 p2 p3" {
		t.Fatalf("generation 3 applied as %q, want p1 p2 p3", got)
	}

	// Too many changed to name: the agent reads its document as of the
	// generation key; it did not change, so nothing new is applied.
	reads := a.reads.Load()
	rev = putGenDoc(t, cli, contract.GenerationDoc{Generation: 4, PlanesGeneration: 3, Planes: healthy(4), ChangedAll: true})
	testutil.WaitFor(t, wait, "the agent to read its document at generation 4", func() bool {
		return a.genRev.Load() >= rev && a.reads.Load() == reads+1
	})
	// The same with the generation key seen before the document it goes
	// with: read as of the key, the document is generation 5's.
	d = doc("host-a", 5)
	d.Ports[0].Link = "degraded"
	putGenDoc(t, cli, contract.GenerationDoc{Generation: 5, PlanesGeneration: 3, Planes: healthy(4), ChangedAll: true})
	putDoc(t, cli, d) // too late for generation 5: it must not be applied with its planes
	d.Generation = 6
	putDoc(t, cli, d)
	putGenDoc(t, cli, contract.GenerationDoc{Generation: 6, PlanesGeneration: 3, Planes: healthy(4), Changed: []string{"host-a"}})
	testutil.WaitFor(t, wait, "generation 6 applied", func() bool { return rec.last() == 6 })
	if got := rec.generations(); !slices.Equal(got, []uint64{1, 2, 3, 6}) {
		t.Fatalf("applied %v, want [1 2 3 6]: the document written after generation 5's key is not generation 5's", got)
	}
	if st := a.Status(); len(st.Errors) != 0 {
		t.Fatalf("status errors %q", st.Errors)
	}
}

// appliedPlanes names the planes of the last configuration applied.
func appliedPlanes(rec *recorder) string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var names []string
	for _, p := range rec.applied[len(rec.applied)-1].PathSet.Planes {
		names = append(names, p.Plane)
	}
	return strings.Join(names, " ")
}

// A leader that died mid-update left this endpoint's document of its
// generation; the next leader's generation names the endpoint. The agent
// takes the document it has (written after the previous generation key)
// and does not wait for another.
func TestDocumentLeftByACrashedUpdateIsApplied(t *testing.T) {
	cli, _, rec := startApplied(t)
	putDoc(t, cli, doc("host-a", 2)) // the crashed update
	putGenDoc(t, cli, contract.GenerationDoc{Generation: 3, PlanesGeneration: 1, Planes: healthy(4), Changed: []string{"host-a"}})
	testutil.WaitFor(t, wait, "generation 2's document applied", func() bool { return rec.last() == 2 })
}

// A generation key lacking a plane the endpoint's ports are on is refused
// (the plane would resolve as healthy), and one refused for any reason
// makes the agent read its document as of the next valid key, whose
// changes it cannot otherwise know.
func TestGenerationKeyRefusals(t *testing.T) {
	cli, a, rec := startApplied(t)

	planes := healthy(4)[:3]
	putDoc(t, cli, doc("host-a", 2))
	rev := putGenDoc(t, cli, contract.GenerationDoc{Generation: 2, PlanesGeneration: 2, Planes: planes, Changed: []string{"host-a"}})
	testutil.WaitFor(t, wait, "the refusal in the status", func() bool {
		return a.genRev.Load() >= rev && strings.Contains(strings.Join(a.Status().Errors, ";"), `no state for plane "p3"`)
	})
	if rec.last() != 1 {
		t.Fatalf("applied %v with a generation key lacking p3", rec.generations())
	}

	putDoc(t, cli, doc("host-a", 3))
	rev = putRaw(t, cli, contract.KeyGeneration, `{"schema":"3.0","generation":3,"changed":["host-a"]}`)
	testutil.WaitFor(t, wait, "the agent to see generation 3", func() bool { return a.genRev.Load() >= rev })
	reads := a.reads.Load()
	putGenDoc(t, cli, contract.GenerationDoc{Generation: 4, PlanesGeneration: 2, Planes: healthy(4)})
	testutil.WaitFor(t, wait, "generation 3's document applied", func() bool { return a.Status().AppliedGeneration == 3 })
	if a.reads.Load() != reads+1 {
		t.Fatalf("%d reads after the refused key, want 1", a.reads.Load()-reads)
	}
	if st := a.Status(); len(st.Errors) != 0 {
		t.Fatalf("status errors %q", st.Errors)
	}
}

// The generation key and the endpoint's document arrive on two watches in
// no common order: whichever comes first, the agent applies nothing until
// it holds both of one generation, and never its old document with the
// new planes.
func TestOneGenerationWhateverTheOrderOfDelivery(t *testing.T) {
	planes := healthy(4)
	planes[1].State, planes[1].CapacityRatio = "down", 0
	d2 := doc("host-a", 2)
	d2.Ports[0].Link = "down"
	gen1 := mustJSON(t, contract.GenerationDoc{Schema: contract.SchemaVersion, Generation: 1, PlanesGeneration: 1, Planes: healthy(4)})
	gen2 := mustJSON(t, contract.GenerationDoc{Schema: contract.SchemaVersion, Generation: 2, PlanesGeneration: 2, Planes: planes, Changed: []string{"host-a"}})
	gen3 := mustJSON(t, contract.GenerationDoc{Schema: contract.SchemaVersion, Generation: 3, PlanesGeneration: 3, Planes: healthy(4)})
	// Revisions as fabricd writes them: document 1 (4), key 1 (5),
	// document 2 (10), key 2 (11), key 3 (12).
	type event struct {
		gen   bool
		value string
		rev   int64
	}
	doc2, key2, key3 := event{false, mustJSON(t, d2), 10}, event{true, gen2, 11}, event{true, gen3, 12}
	for name, order := range map[string][]event{
		"document first": {doc2, key2, key3},
		"key first":      {key2, doc2, key3},
		"keys first":     {key2, key3, doc2},
	} {
		rec := &recorder{}
		a := newAgent(t, Config{Endpoint: "host-a", EtcdEndpoints: []string{"http://127.0.0.1:1"}, Planes: 4}, rec) // never run: events fed by hand
		st := &watchState{}
		a.onGeneration(st, []byte(gen1), 5)
		a.onDocument(st, []byte(mustJSON(t, doc("host-a", 1))), true, 4)
		a.evaluate(st)
		for _, ev := range order {
			if ev.gen {
				a.onGeneration(st, []byte(ev.value), ev.rev)
			} else {
				a.onDocument(st, []byte(ev.value), true, ev.rev)
			}
			a.evaluate(st)
		}
		rec.mu.Lock()
		for _, c := range rec.applied {
			var got []string
			for _, p := range c.PathSet.Planes {
				got = append(got, p.Plane)
			}
			want := map[uint64]string{1: "p0 p1 p2 p3", 2: "p2 p3", 3: "p1 p2 p3"}[c.Generation]
			if strings.Join(got, " ") != want {
				t.Errorf("%s: generation %d applied as %v, want %s: a mix of two generations", name, c.Generation, got, want)
			}
		}
		rec.mu.Unlock()
		if got := rec.generations(); got[0] != 1 || got[len(got)-1] != 3 {
			t.Errorf("%s: applied %v, want from 1 to 3", name, got)
		}
	}
}

// A status an apply calls for is written within StatusSpread, not at
// once, and applies close together share one write: thousands of agents
// applying one generation do not all write to etcd together.
func TestStatusSpreadAfterApply(t *testing.T) {
	cli := kvtest.New(t).Client
	putDoc(t, cli, doc("host-a", 1))
	putGen(t, cli, 1)
	rec := &recorder{}
	const spread = 2 * time.Second
	a := newAgent(t, Config{Endpoint: "host-a", Client: cli, StateDir: t.TempDir(), Planes: 4, StatusSpread: spread}, rec)
	start(t, a)
	testutil.WaitFor(t, 2*spread+wait, "generation 1 in the status", func() bool {
		st, _, ok := getStatus(t, cli, "host-a")
		return ok && st.AppliedGeneration == 1
	})
	ctx := testenv.Context(t)
	before, err := cli.Get(ctx, contract.KeyStatus("host-a"))
	if err != nil {
		t.Fatal(err)
	}
	var first time.Time
	for _, g := range []uint64{2, 3} {
		putDoc(t, cli, doc("host-a", g))
		putGen(t, cli, g)
		testutil.WaitFor(t, wait, "the apply", func() bool { return rec.last() == g })
		if g == 2 {
			first = time.Now()
		}
	}
	if gap := time.Since(first); gap > spread/4 {
		t.Fatalf("the two applies came %v apart, more than a quarter of the spread: nothing to compare", gap)
	}
	testutil.WaitFor(t, spread+wait, "generation 3 in the status", func() bool {
		st, _, _ := getStatus(t, cli, "host-a")
		return st.AppliedGeneration == 3
	})
	if took := time.Since(first); took > spread+500*time.Millisecond {
		t.Errorf("the status followed the applies %v later, spread %v", took, spread)
	}
	after, err := cli.Get(ctx, contract.KeyStatus("host-a"))
	if err != nil {
		t.Fatal(err)
	}
	if writes := after.Kvs[0].Version - before.Kvs[0].Version; writes != 1 {
		t.Errorf("%d status writes for 2 applies %v apart, want 1", writes, spread/4)
	}
}

// A generation that asks for a longer spread than the agent's own (a
// large fleet) gets it: the status follows the apply no sooner than a
// quarter of it.
func TestStatusSpreadOfTheFleet(t *testing.T) {
	cli := kvtest.New(t).Client
	putDoc(t, cli, doc("host-a", 1))
	putGen(t, cli, 1)
	rec := &recorder{}
	a := newAgent(t, Config{Endpoint: "host-a", Client: cli, StateDir: t.TempDir(), Planes: 4, StatusSpread: 20 * time.Millisecond,
		StatusInterval: time.Minute}, rec)
	start(t, a)
	testutil.WaitFor(t, wait, "generation 1 in the status", func() bool {
		st, _, ok := getStatus(t, cli, "host-a")
		return ok && st.AppliedGeneration == 1
	})
	time.Sleep(200 * time.Millisecond) // past any write generation 1 kicked (20 ms spread)
	const fleet = 4 * time.Second
	putDoc(t, cli, doc("host-a", 2))
	putGenDoc(t, cli, contract.GenerationDoc{Generation: 2, PlanesGeneration: 1, Planes: healthy(4), StatusSpreadMS: fleet.Milliseconds()})
	testutil.WaitFor(t, wait, "the apply", func() bool { return rec.last() == 2 })
	applied := time.Now()
	testutil.WaitFor(t, fleet+wait, "generation 2 in the status", func() bool {
		st, _, _ := getStatus(t, cli, "host-a")
		return st.AppliedGeneration == 2
	})
	if took := time.Since(applied); took < fleet/4-100*time.Millisecond {
		t.Errorf("the status followed the apply %v later; the generation asked for a spread of %v (at least %v)", took, fleet, fleet/4)
	}
}
