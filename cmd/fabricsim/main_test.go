package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/multiplane/multiplane/internal/testutil"
)

func TestUserspaceFabricStartsAndStops(t *testing.T) {
	port := testutil.FabricPort(t, 3, 2)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb testutil.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--planes", "2", "--hosts", "3", "--rate", "50", "--port", strconv.Itoa(port)}, &out, &errb)
	}()
	testutil.WaitFor(t, 10*time.Second, "the fabric ready", func() bool { return strings.Contains(out.String(), "ready") })
	for _, want := range []string{"host 2 plane 1 local 127.77.1.3 peer 127.78.1.3:" + strconv.Itoa(port), "host 0 plane 0 local 127.77.0.1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not stop on cancel")
	}
}

func TestBadFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--kind", "moon"}, &out, &errb); code != 2 {
		t.Fatalf("exit %d", code)
	}
	if code := run(context.Background(), []string{"--hosts", "0"}, &out, &errb); code != 1 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
}
