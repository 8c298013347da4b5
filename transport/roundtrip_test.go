package transport

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/multiplane/multiplane/internal/testenv"
)

// echo starts a goroutine that sends back every message c receives.
func echo(ctx context.Context, c *Conn) {
	go func() {
		for {
			m, err := c.Recv(ctx)
			if err != nil {
				return
			}
			if err := c.Send(ctx, m); err != nil {
				return
			}
			c.Recycle(m)
		}
	}()
}

// TestRoundTripAllocatesNothing: a small message's Send and Recv on both
// ends reuse their state. Each allocation is garbage, and the collections
// it caused set the 99.9th percentile of `endpoint bench --lat` (busy
// polling: 199 µs with them, 81 µs with the collector off).
func TestRoundTripAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	ctx := testenv.Context(t)
	a := listenT(t, Config{Local: loopbackAddrs(4)})
	b := listenT(t, Config{Local: loopbackAddrs(4)})
	ca, cb := pair(t, ctx, a, b, b.LocalAddrs())
	echo(ctx, cb)
	msg := make([]byte, 64)
	roundTrip := func() {
		if err := ca.Send(ctx, msg); err != nil {
			t.Fatal(err)
		}
		m, err := ca.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ca.Recycle(m)
	}
	for range 200 { // pools, queues and maps reach their size
		roundTrip()
	}
	// Both transports and the echo run in this process: AllocsPerRun
	// counts all of them. A fraction is allowed for the runtime's own
	// (timers, a sync.Pool emptied by a collection).
	if n := testing.AllocsPerRun(2000, roundTrip); n > 0.2 {
		t.Errorf("%.2f allocations per 64-byte round trip, want none", n)
	}
}

// BenchmarkRoundTrip is a 64-byte ping-pong on one connection over 4
// loopback planes, one message in flight, the way `endpoint bench --lat`
// drives the transport. allocs/op is per round trip: each is garbage the
// collector must reclaim, and a collection cycle is what sets the
// round trip's 99.9th percentile.
func BenchmarkRoundTrip(b *testing.B) {
	for _, mode := range []PollMode{PollBusy, PollAdaptive, PollBlocking} {
		b.Run(mode.String(), func(b *testing.B) {
			ctx := testenv.Context(b)
			a := listenT(b, Config{Local: loopbackAddrs(4), PollMode: mode})
			bt := listenT(b, Config{Local: loopbackAddrs(4), PollMode: mode})
			ca, cb := pair(b, ctx, a, bt, bt.LocalAddrs())
			echo(ctx, cb)
			msg := make([]byte, 64)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := ca.Send(ctx, msg); err != nil {
					b.Fatal(err)
				}
				m, err := ca.Recv(ctx)
				if err != nil {
					b.Fatal(err)
				}
				ca.Recycle(m)
			}
		})
	}
}

// TestSendsAbandonedAndAsyncReuseNoState mixes Sends whose context ends
// before the acknowledgement (their message state must not be recycled:
// it is still signalled later) with SendAsync and plain Sends, and checks
// that every message arrives once and intact.
func TestSendsAbandonedAndAsyncReuseNoState(t *testing.T) {
	ctx := testenv.Context(t)
	a := listenT(t, Config{Local: loopbackAddrs(2)})
	b := listenT(t, Config{Local: loopbackAddrs(2)})
	ca, cb := pair(t, ctx, a, b, b.LocalAddrs())
	const n = 600
	got := make(chan error, 1)
	go func() {
		seen := make([]bool, n)
		for range n {
			m, err := cb.Recv(ctx)
			if err != nil {
				got <- err
				return
			}
			i := int(m[0]) | int(m[1])<<8
			if i >= n || seen[i] || len(m) != 64+i || m[len(m)-1] != byte(i) {
				got <- fmt.Errorf("message %d of %d bytes unexpected (seen %v)", i, len(m), i < n && seen[i])
				return
			}
			seen[i] = true
			cb.Recycle(m)
		}
		got <- nil
	}()
	var comps []*Completion
	for i := range n {
		msg := make([]byte, 64+i)
		msg[0], msg[1], msg[len(msg)-1] = byte(i), byte(i>>8), byte(i)
		switch i % 3 {
		case 0:
			done, cancel := context.WithCancel(ctx)
			cancel() // Send queues it, then returns at once
			if err := ca.Send(done, msg); err != nil && !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
		case 1:
			c, err := ca.SendAsync(ctx, msg)
			if err != nil {
				t.Fatal(err)
			}
			comps = append(comps, c)
		default:
			if err := ca.Send(ctx, msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range comps {
		if err := c.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// TestCompletionChannelOnDemand: Done made before the end is closed by
// it, Done asked after the end is closed already, and Err and Wait give
// the result only once it is there.
func TestCompletionChannelOnDemand(t *testing.T) {
	ctx := testenv.Context(t)
	var early Completion
	ch := early.Done()
	if early.Err() != nil {
		t.Fatal("Err before the end")
	}
	short, cancel := context.WithCancel(ctx)
	cancel()
	if err := early.Wait(short); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a pending send: %v", err)
	}
	early.end(ErrClosed)
	select {
	case <-ch:
	default:
		t.Fatal("Done taken before the end was not closed by it")
	}
	if early.Err() != ErrClosed || early.Wait(ctx) != ErrClosed {
		t.Fatalf("Err %v", early.Err())
	}
	var late Completion
	late.end(nil)
	select {
	case <-late.Done():
	default:
		t.Fatal("Done asked after the end is open")
	}
	if late.done != nil {
		t.Error("a channel was made for a completion asked after its end")
	}
}
