package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/kv"
	"github.com/multiplane/multiplane/policy"
)

// syncBuffer is a bytes.Buffer safe for the agent's logger and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestRunAppliesAndKeepsLastKnownGood runs `endpoint run` against a real
// etcd: it applies the published document and reports it; restarted while
// etcd is down, it comes up on the last known good document.
func TestRunAppliesAndKeepsLastKnownGood(t *testing.T) {
	ctx := testenv.Context(t)
	etcdDir := t.TempDir()
	etcd, err := kv.Open(ctx, kv.Config{DataDir: etcdDir}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	doc := policy.EndpointDoc{Generation: 3, Endpoint: "host-a", PathSet: policy.PathSet{Planes: []policy.PlanePath{
		{Plane: "p0", Index: 0, Address: "127.0.0.1", Weight: 0.5, Entropy: 2},
		{Plane: "p1", Index: 1, Address: "127.0.0.2", Weight: 0.5, Entropy: 2},
	}}}
	put := func(key string, v any) {
		b, _ := json.Marshal(v)
		if _, err := etcd.Client.Put(ctx, key, string(b)); err != nil {
			t.Fatal(err)
		}
	}
	put(policy.KeyEndpoint("host-a"), doc)
	put(policy.KeyGeneration, policy.GenerationDoc{Generation: 3})

	stateDir := t.TempDir()
	args := []string{"run", "--name", "host-a", "--etcd-endpoints", strings.Join(etcd.Endpoints(), ","),
		"--bind", "127.0.0.1:0,127.0.0.2:0", "--state-dir", stateDir, "--status-interval", "1s", "--etcd-dial-timeout", "500ms"}
	start := func() (context.CancelFunc, chan int, *syncBuffer) {
		var out syncBuffer
		done := make(chan int, 1)
		runCtx, cancel := context.WithCancel(ctx)
		go func() { done <- runWithContext(runCtx, args, &out, &out) }()
		return cancel, done, &out
	}
	stop, done, out := start()
	deadline := time.Now().Add(20 * time.Second)
	var st policy.StatusDoc
	for {
		resp, err := etcd.Client.Get(ctx, policy.KeyStatus("host-a"))
		if err == nil && len(resp.Kvs) == 1 {
			json.Unmarshal(resp.Kvs[0].Value, &st)
			if st.AppliedGeneration == 3 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no status with generation 3; last %+v\n%s", st, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "host-a.lkg.json")); err != nil {
		t.Fatalf("no last-known-good file: %v", err)
	}
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("endpoint run exited %d\n%s", code, out.String())
	}

	// etcd gone; the agent starts on its last known good document.
	etcd.Close()
	stop, done, out = start()
	defer func() { stop(); <-done }()
	deadline = time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "last-known-good") {
		if time.Now().After(deadline) {
			t.Fatalf("agent did not apply its last known good document with etcd down:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
