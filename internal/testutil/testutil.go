// Package testutil holds the helpers tests across the repository share.
// WaitFor is the one way a test waits for something to happen: it polls a
// condition until it holds or a deadline passes, instead of sleeping for a
// guessed duration.
//
//	testutil.WaitFor(t, 10*time.Second, "generation 3 applied", func() bool {
//		return agent.Status().AppliedGeneration == 3
//	})
package testutil

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// Poll intervals of WaitFor: the first check is immediate, then the
// interval doubles from minPoll up to maxPoll, so a condition that holds
// within microseconds is seen at once and a long wait does not spin.
const (
	minPoll = 50 * time.Microsecond
	maxPoll = 10 * time.Millisecond
)

// WaitFor polls cond until it returns true, and fails t (t.Fatalf, naming
// what and the timeout) if it is still false once timeout has passed. cond
// runs on the calling goroutine; it must not block for long.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	poll := minPoll
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
			return
		}
		time.Sleep(poll) // the poll interval, not a wait for the condition
		poll = min(2*poll, maxPoll)
	}
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers (a child
// process's stdout and stderr) and readers.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
