package testutil

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fatalTB records Fatalf instead of failing the real test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
}

func TestWaitFor(t *testing.T) {
	t.Run("holds at once", func(t *testing.T) {
		calls := 0
		t0 := time.Now()
		WaitFor(t, time.Second, "true", func() bool { calls++; return true })
		if calls != 1 || time.Since(t0) > 100*time.Millisecond {
			t.Fatalf("%d calls in %v, want 1 at once", calls, time.Since(t0))
		}
	})
	t.Run("becomes true", func(t *testing.T) {
		var n atomic.Int32
		go func() {
			for range 5 {
				n.Add(1)
			}
		}()
		calls := 0
		WaitFor(t, 10*time.Second, "five increments", func() bool { calls++; return n.Load() == 5 })
		if n.Load() != 5 {
			t.Fatalf("returned with n = %d", n.Load())
		}
	})
	t.Run("times out", func(t *testing.T) {
		f := &fatalTB{TB: t}
		calls := 0
		t0 := time.Now()
		WaitFor(f, 50*time.Millisecond, "the impossible", func() bool { calls++; return false })
		took := time.Since(t0)
		if !strings.Contains(f.msg, "the impossible") || !strings.Contains(f.msg, "50ms") {
			t.Fatalf("Fatalf message %q does not name what and the timeout", f.msg)
		}
		if took < 50*time.Millisecond || took > 2*time.Second {
			t.Fatalf("gave up after %v, want just after 50ms", took)
		}
		// Polled, not spun: 50 µs doubling to 10 ms is at most ~15 checks in 50 ms.
		if calls < 2 || calls > 30 {
			t.Fatalf("cond called %d times in %v", calls, took)
		}
	})
}
