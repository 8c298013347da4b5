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
