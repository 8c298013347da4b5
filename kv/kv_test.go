package kv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/kv"
)

func TestEmbeddedKeepsDataAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := testenv.Context(t)
	s, err := kv.Open(ctx, kv.Config{DataDir: dir}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	first := s.Endpoints()
	if _, err := s.Client.Put(ctx, kv.Prefix+"k", "v1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = kv.Open(ctx, kv.Config{DataDir: dir}, testenv.Logger(t))
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer s.Close()
	if got := s.Endpoints(); got[0] != first[0] {
		t.Errorf("restart moved the client URL from %s to %s", first[0], got[0])
	}
	resp, err := s.Client.Get(ctx, kv.Prefix+"k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v1" {
		t.Fatalf("after restart got %v, want v1", resp.Kvs)
	}
}

func TestExternalUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := kv.Open(ctx, kv.Config{Endpoints: []string{"http://127.0.0.1:1"}, DialTimeout: 300 * time.Millisecond}, testenv.Logger(t))
	if !errors.Is(err, kv.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg kv.Config
		ok  bool
	}{
		{kv.Config{}, true},
		{kv.Config{Listen: "10.0.0.1:2379"}, true},
		{kv.Config{Listen: "127.0.0.1:2379"}, true},
		{kv.Config{Listen: "0.0.0.0:2379", Advertise: "https://10.0.0.1:2379"}, true},
		{kv.Config{Endpoints: []string{"https://etcd:2379"}}, true}, // enrollment off, nothing more
		{kv.Config{Listen: "0.0.0.0:2379"}, false},                  // which address do agents get?
		{kv.Config{Listen: "[::]:2379"}, false},
		{kv.Config{Listen: "etcd.local:2379"}, false},
		{kv.Config{Listen: "10.0.0.1:0"}, false},
		{kv.Config{Listen: "10.0.0.1"}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok %v", tc.cfg, err, tc.ok)
		}
	}
}
