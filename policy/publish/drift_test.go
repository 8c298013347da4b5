package publish_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/kv/kvtest"
	"github.com/multiplane/multiplane/policy/publish"
)

func startWith(t *testing.T, cli *clientv3.Client, cfg publish.Config, src *source, results chan publish.Result, setup func(*publish.Publisher)) *publish.Publisher {
	cfg.MaxTxnOps, cfg.ParallelTxns, cfg.SessionTTL = 16, 2, 2
	p := publish.New(cli, cfg, testenv.Logger(t))
	p.OnResult(func(r publish.Result) { results <- r })
	if setup != nil {
		setup(p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx, src.compute); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return p
}

func put(t *testing.T, cli *clientv3.Client, key, value string) {
	t.Helper()
	if _, err := cli.Put(context.Background(), key, value); err != nil {
		t.Fatal(err)
	}
}

func endpointDoc(t *testing.T, cli *clientv3.Client, name string) (contract.EndpointDoc, bool) {
	t.Helper()
	resp, err := cli.Get(context.Background(), contract.KeyEndpoint(name))
	if err != nil {
		t.Fatal(err)
	}
	var d contract.EndpointDoc
	if len(resp.Kvs) == 0 {
		return d, false
	}
	json.Unmarshal(resp.Kvs[0].Value, &d)
	return d, true
}

// Documents changed behind the leader's back (content, generation, deleted,
// added) are repaired at a new generation and counted, through the watch
// and, with the watch off, through the periodic reconciliation.
func TestRepairsDrift(t *testing.T) {
	for _, tc := range []struct {
		name  string
		every time.Duration
		setup func(*publish.Publisher)
	}{
		{"watch", time.Hour, nil},
		{"periodic", 200 * time.Millisecond, (*publish.Publisher).NoWatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := kvtest.New(t).Client
			src := &source{}
			src.set(output(10, false))
			results := make(chan publish.Result, 10)
			cfg := publish.DefaultConfig()
			cfg.ID, cfg.ReconcileEvery = "a", tc.every
			p := startWith(t, cli, cfg, src, results, tc.setup)
			if r := waitResult(t, results); r.Generation != 1 {
				t.Fatalf("first publication %+v", r)
			}
			want, _ := endpointDoc(t, cli, "h003")

			// Someone else edits etcd, in one transaction (so the
			// leader repairs it all at once).
			tampered := want
			tampered.RatePolicy.EgressBps = 1 // a different cap, same generation
			doc3, _ := json.Marshal(tampered)
			g5, _ := endpointDoc(t, cli, "h005")
			g5.Generation = 0 // content as computed, generation rewound
			doc5, _ := json.Marshal(g5)
			_, err := cli.Txn(context.Background()).Then(
				clientv3.OpPut(contract.KeyEndpoint("h003"), string(doc3)),
				clientv3.OpPut(contract.KeyEndpoint("h005"), string(doc5)),
				clientv3.OpDelete(contract.KeyEndpoint("h004")),
				clientv3.OpPut(contract.KeyEndpoint("intruder"), `{"generation":1,"endpoint":"intruder"}`),
			).Commit()
			if err != nil {
				t.Fatal(err)
			}

			r := waitResult(t, results)
			if r.Generation != 2 {
				t.Fatalf("repair published %+v, want generation 2", r)
			}
			for _, name := range []string{"h003", "h004", "h005"} {
				got, ok := endpointDoc(t, cli, name)
				if !ok || got.Generation != 2 || got.RatePolicy.EgressBps != want.RatePolicy.EgressBps {
					t.Fatalf("%s after repair = %+v (present %v), want the computed document at generation 2", name, got, ok)
				}
			}
			if _, ok := endpointDoc(t, cli, "intruder"); ok {
				t.Fatal("a document added behind the leader's back is still there")
			}
			if g, _ := generationOf(t, cli, contract.KeyGeneration); g != 2 {
				t.Fatalf("generation key %d, want 2", g)
			}
			if g, _ := generationOf(t, cli, contract.KeyEndpoint("h006")); g != 1 {
				t.Fatalf("untouched h006 rewritten at %d", g)
			}
			testutil.WaitFor(t, 5*time.Second, "drift counted", func() bool {
				d, _, _ := p.Counts()
				return d == 4
			})

			// Its own writes are not drift: no further publication.
			p.Trigger()
			select {
			case r := <-results:
				t.Fatalf("published %+v with nothing changed", r)
			case <-time.After(min(3*tc.every, 500*time.Millisecond) + 100*time.Millisecond): // a window to see nothing happen
			}
			if d, _, _ := p.Counts(); d != 4 {
				t.Fatalf("drift repairs %d after the leader's own writes, want 4", d)
			}
		})
	}
}

// A generation key rewound behind the leader's back is drift as well: the
// next generation stays above every one the leader wrote.
func TestGenerationKeyRewoundIsRepaired(t *testing.T) {
	cli := kvtest.New(t).Client
	src := &source{}
	src.set(output(3, false))
	results := make(chan publish.Result, 10)
	cfg := publish.DefaultConfig()
	cfg.ID, cfg.ReconcileEvery = "a", time.Hour
	startWith(t, cli, cfg, src, results, nil)
	waitResult(t, results)
	put(t, cli, contract.KeyGeneration, `{"generation":0}`)
	if r := waitResult(t, results); r.Generation != 2 {
		t.Fatalf("repair = %+v, want generation 2", r)
	}
	if g, _ := generationOf(t, cli, contract.KeyGeneration); g != 2 {
		t.Fatalf("generation key %d, want 2", g)
	}
}

// Generations never wrap or pass 2^53: a corrupt generation found in etcd
// stops publication (counted) while the replica keeps leading; up to the
// bound it publishes, and a new leader continues above what etcd holds.
func TestGenerationBound(t *testing.T) {
	for _, tc := range []struct {
		name     string
		found    uint64
		want     uint64 // 0: refused
		inDocKey bool   // the high generation is in a document, not the generation key
	}{
		{"2^64-1 in the generation key", 1<<64 - 1, 0, false},
		{"2^64-1 in a document", 1<<64 - 1, 0, true},
		{"2^53 in the generation key", publish.MaxGeneration, 0, false},
		{"2^53-1 in the generation key", publish.MaxGeneration - 1, publish.MaxGeneration, false},
		{"an older leader's 41", 41, 42, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := kvtest.New(t).Client
			if tc.inDocKey {
				put(t, cli, contract.KeyEndpoint("h000"), fmt.Sprintf(`{"generation":%d,"endpoint":"h000"}`, tc.found))
				put(t, cli, contract.KeyGeneration, `{"generation":7}`)
			} else {
				put(t, cli, contract.KeyGeneration, fmt.Sprintf(`{"generation":%d}`, tc.found))
			}
			src := &source{}
			src.set(output(3, false))
			results := make(chan publish.Result, 10)
			cfg := publish.DefaultConfig()
			cfg.ID, cfg.ReconcileEvery = "a", time.Hour
			p := startWith(t, cli, cfg, src, results, nil)
			if tc.want != 0 {
				if r := waitResult(t, results); r.Generation != tc.want {
					t.Fatalf("published generation %d, want %d", r.Generation, tc.want)
				}
				return
			}
			testutil.WaitFor(t, 20*time.Second, "the publication refused", func() bool {
				_, _, refused := p.Counts()
				return refused > 0
			})
			select {
			case r := <-results:
				t.Fatalf("published %+v past the bound", r)
			default:
			}
			if !p.IsLeader() {
				t.Fatal("the replica stopped leading")
			}
			key, want := contract.KeyGeneration, tc.found
			if tc.inDocKey {
				want = 7
			}
			if g, _ := generationOf(t, cli, key); g != want {
				t.Fatalf("generation key moved to %d (wrapped?), want %d kept", g, want)
			}
		})
	}
}

// Drift the first reconciliation missed: fields added to a document or to
// the generation key at the same generation, keys invented under the
// leader's prefixes, and the whole prefix deleted. Each is repaired, and
// generations keep going up; keys outside the leader's prefixes are left.
func TestRepairsForeignFieldsKeysAndWipes(t *testing.T) {
	cli := kvtest.New(t).Client
	src := &source{}
	src.set(output(3, false))
	results := make(chan publish.Result, 10)
	cfg := publish.DefaultConfig()
	cfg.ID, cfg.ReconcileEvery = "a", time.Hour
	startWith(t, cli, cfg, src, results, nil)
	waitResult(t, results)
	ctx := context.Background()
	raw := func(key string) string {
		resp, err := cli.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	notOurs := contract.Prefix + "elsewhere/x"
	put(t, cli, notOurs, "kept")

	steps := []struct {
		name   string
		tamper func()
	}{
		{"a foreign field in a document", func() {
			doc := raw(contract.KeyEndpoint("h001"))
			put(t, cli, contract.KeyEndpoint("h001"), doc[:len(doc)-1]+`,"backdoor":true}`)
		}},
		{"a foreign field in the generation key", func() {
			doc := raw(contract.KeyGeneration)
			put(t, cli, contract.KeyGeneration, doc[:len(doc)-1]+`,"backdoor":true}`)
		}},
		{"the generation key's leader changed", func() {
			var g contract.GenerationDoc
			json.Unmarshal([]byte(raw(contract.KeyGeneration)), &g)
			g.Leader = "someone-else"
			b, _ := json.Marshal(g)
			put(t, cli, contract.KeyGeneration, string(b))
		}},
		{"a key invented under fabric/", func() { put(t, cli, contract.Prefix+"fabric/zzz", `{"generation":1}`) }},
		{"a key invented under directory/", func() { put(t, cli, contract.KeyDirectory("ghost"), `garbage`) }},
		{"the whole prefix deleted", func() {
			if _, err := cli.Delete(ctx, contract.Prefix, clientv3.WithPrefix()); err != nil {
				t.Fatal(err)
			}
			put(t, cli, notOurs, "kept")
		}},
	}
	last := uint64(1)
	for _, s := range steps {
		s.tamper()
		r := waitResult(t, results)
		if r.Generation <= last {
			t.Fatalf("%s: repaired at generation %d, not above %d", s.name, r.Generation, last)
		}
		last = r.Generation
		for _, key := range []string{contract.Prefix + "fabric/zzz", contract.KeyDirectory("ghost")} {
			if v := raw(key); v != "" {
				t.Fatalf("%s: %s still holds %q", s.name, key, v)
			}
		}
		for _, key := range []string{contract.KeyEndpoint("h001"), contract.KeyGeneration} {
			if v := raw(key); strings.Contains(v, "backdoor") || v == "" {
				t.Fatalf("%s: %s = %q after the repair", s.name, key, v)
			}
		}
		var g contract.GenerationDoc
		json.Unmarshal([]byte(raw(contract.KeyGeneration)), &g)
		if g.Generation != last || g.Leader != "a" {
			t.Fatalf("%s: generation key %+v, want generation %d by a", s.name, g, last)
		}
		if v := raw(notOurs); v != "kept" {
			t.Fatalf("%s: a key outside the leader's prefixes became %q", s.name, v)
		}
	}
}
