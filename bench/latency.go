package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"time"
)

// warmup is the untimed round trips before each size.
const warmup = 16

// runLatency is the client of --lat: per message size, ping-pong round
// trips on one connection (one message in flight), each ping and pong
// verified, then perftest's latency columns. The run ends with the usual
// end message and the server's verified counts.
func runLatency(ctx context.Context, cfg *Config, tr Transport, stderr io.Writer) (Result, error) {
	r := cfg.result()
	r.Poll = cfg.Poll
	r.Latency = []LatencyStats{}
	c, err := dial(ctx, cfg, tr)
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	if err := waitForStart(ctx, cfg.StartAt, stderr); err != nil {
		return Result{}, err
	}
	h := header{session: rand.Uint64(), conns: 1}
	pattern := newPattern(cfg.Size)
	var sent counts
	var seq uint64
	start := time.Now()
	var pong []byte // handed back to Recv: no allocation per round trip
	ping := func(msg []byte) (time.Duration, error) {
		h.kind, h.seq = kindPing, seq
		seq++
		fillKind(msg, pattern, h)
		t0 := time.Now()
		if err := c.Send(ctx, msg); err != nil {
			return 0, fmt.Errorf("bench: ping %d: %w", h.seq, err)
		}
		sent.messages++
		sent.bytes += uint64(len(msg))
		for {
			var err error
			pong, err = c.Recv(ctx, pong)
			if err != nil {
				return 0, fmt.Errorf("bench: waiting for pong %d: %w", h.seq, err)
			}
			ph, err := verify(pong)
			if err == nil && ph.kind == kindProgress {
				continue
			}
			rtt := time.Since(t0)
			if err == nil && (ph.kind != kindPong || ph.seq != h.seq || ph.session != h.session || len(pong) != len(msg)) {
				err = fmt.Errorf("%w: pong kind %d seq %d of %d bytes for ping %d of %d", ErrCorrupt, ph.kind, ph.seq, len(pong), h.seq, len(msg))
			}
			if err != nil {
				return 0, fmt.Errorf("%w: %w", ErrVerify, err)
			}
			return rtt, nil
		}
	}
	for _, size := range cfg.latencySizes() {
		msg := make([]byte, size)
		for range warmup {
			if _, err := ping(msg); err != nil {
				return r, err
			}
		}
		// Room for the typical run, so growing it does not make garbage.
		samples := make([]time.Duration, 0, max(cfg.Iterations, 1<<18))
		stopAt := time.Now().Add(cfg.Duration)
		for i := 0; cfg.Duration > 0 || i < cfg.Iterations; i++ {
			if cfg.Duration > 0 && !time.Now().Before(stopAt) {
				break
			}
			rtt, err := ping(msg)
			if err != nil {
				return r, err
			}
			samples = append(samples, rtt)
		}
		st := latencyStats(size, samples)
		r.Latency = append(r.Latency, st)
		if cfg.Interval > 0 {
			fmt.Fprintf(stderr, "bench: client lat %d bytes: %d round trips, typical %.2f us, 99.9%% %.2f us\n", size, st.Iterations, st.TypicalUs, st.P999Us)
		}
	}
	end := h
	end.kind, end.seq = kindEnd, 0
	if err := c.Send(ctx, appendCountsList(end, []counts{sent})); err != nil {
		return r, fmt.Errorf("bench: send end: %w", err)
	}
	got, err := recvResult(ctx, c, h.session, 1)
	if err != nil {
		return r, fmt.Errorf("bench: %w", err)
	}
	v := got[0]
	r.Messages, r.Bytes, r.Errors = int64(v.messages), int64(v.bytes), int64(v.errors)
	r.Seconds = time.Since(start).Seconds()
	if v.errors != 0 || v != (counts{messages: sent.messages, bytes: sent.bytes}) {
		return r, fmt.Errorf("%w: sent %d pings (%d bytes), server verified %d (%d bytes) with %d errors",
			ErrVerify, sent.messages, sent.bytes, v.messages, v.bytes, v.errors)
	}
	return r, nil
}
