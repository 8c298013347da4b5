package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/multiplane/multiplane/agent"
	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/kv"
)

// TestRunAppliesAndKeepsLastKnownGood runs `endpoint run` against a real
// etcd: it applies the published document, saves it and then reports it;
// restarted while etcd is down, it comes up on the last known good document
// (asserted on the structured "applied" log record and its source field).
func TestRunAppliesAndKeepsLastKnownGood(t *testing.T) {
	ctx := testenv.Context(t)
	etcdDir := t.TempDir()
	etcd, err := kv.Open(ctx, kv.Config{DataDir: etcdDir}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	doc := contract.EndpointSpec{Schema: contract.SchemaVersion, Generation: 3, Endpoint: "host-a", Entropy: 2, DegradedLinkFactor: 0.5,
		Ports: []contract.SpecPort{{Plane: "p0", Index: 0, Address: "127.0.0.1"}, {Plane: "p1", Index: 1, Address: "127.0.0.2"}}}
	put := func(key string, v any) {
		b, _ := json.Marshal(v)
		if _, err := etcd.Client.Put(ctx, key, string(b)); err != nil {
			t.Fatal(err)
		}
	}
	put(contract.KeyEndpoint("host-a"), doc)
	put(contract.KeyGeneration, contract.GenerationDoc{Schema: contract.SchemaVersion, Generation: 3, PlanesGeneration: 1, Planes: []contract.PlaneStatus{
		{Name: "p0", Index: 0, State: "healthy", CapacityRatio: 1}, {Name: "p1", Index: 1, State: "healthy", CapacityRatio: 1}}})

	stateDir := t.TempDir()
	args := []string{"run", "--name", "host-a", "--etcd-endpoints", strings.Join(etcd.Endpoints(), ","),
		"--bind", "127.0.0.1:0,127.0.0.2:0", "--state-dir", stateDir, "--status-interval", "1s", "--etcd-dial-timeout", "500ms", "--log-format", "json"}
	start := func() (context.CancelFunc, chan int, *testutil.SyncBuffer) {
		var out testutil.SyncBuffer
		done := make(chan int, 1)
		runCtx, cancel := context.WithCancel(ctx)
		go func() { done <- runWithContext(runCtx, args, &out, &out) }()
		return cancel, done, &out
	}
	stop, done, out := start()
	var st contract.StatusDoc
	testutil.WaitFor(t, 20*time.Second, "the status with generation 3 in etcd", func() bool {
		resp, err := etcd.Client.Get(ctx, contract.KeyStatus("host-a"))
		if err != nil || len(resp.Kvs) != 1 {
			return false
		}
		st = contract.StatusDoc{}
		return json.Unmarshal(resp.Kvs[0].Value, &st) == nil && st.AppliedGeneration == 3
	})
	if st.Source != agent.SourceEtcd {
		t.Fatalf("status %+v: source %q, want %q", st, st.Source, agent.SourceEtcd)
	}
	// Reported as applied, so already saved: no wait here.
	if _, err := os.Stat(filepath.Join(stateDir, "host-a.lkg.json")); err != nil {
		t.Fatalf("status reports generation 3 but there is no last-known-good file: %v", err)
	}
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("endpoint run exited %d\n%s", code, out.String())
	}

	// etcd gone; the agent starts on its last known good document.
	etcd.Close()
	stop, done, out = start()
	defer func() { stop(); <-done }()
	testutil.WaitFor(t, 10*time.Second, "generation 3 applied from the last-known-good file with etcd down", func() bool {
		for _, r := range logRecords(t, out.String()) {
			if r["msg"] == "applied" && r["source"] == agent.SourceLKG && r["generation"] == float64(3) {
				return true
			}
		}
		return false
	})
}

// logRecords parses the JSON log lines written so far (a partial last line
// is left for the next call).
func logRecords(t testing.TB, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	lines := strings.Split(out, "\n")
	for _, line := range lines[:len(lines)-1] {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}
