package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Result is the outcome of a run, printed as the --json line.
type Result struct {
	Mode          Mode     `json:"mode"`
	Role          Role     `json:"role"`
	GoodputBps    float64  `json:"goodput_bps"` // verified bits per second
	PeakBps       float64  `json:"peak_bps"`    // best progress interval
	Bytes         int64    `json:"bytes"`       // verified message bytes, headers included
	Seconds       float64  `json:"seconds"`
	Messages      int64    `json:"messages"`
	Size          int      `json:"size"`
	Retransmits   *int64   `json:"retransmits"` // null when unknown
	Connections   int      `json:"connections"`
	Planes        int      `json:"planes"`
	PerPlaneBytes []int64  `json:"per_plane_bytes"` // null when unknown
	IO            *IOStats `json:"io"`              // null when unknown
	Errors        int64    `json:"errors"`
	// FailedConnections counts connections that ended without their
	// result (client) or before the end of their run (server).
	FailedConnections int `json:"failed_connections"`
	// PerConnectionBytes is the verified bytes of each connection, by
	// index (server: every client's, in the order of Clients); a failed
	// connection counts 0 on the client, what was verified on the server.
	PerConnectionBytes []int64 `json:"per_connection_bytes"`
	// JainFairness is Jain's index over PerConnectionBytes.
	JainFairness float64 `json:"jain_fairness"`
	// Clients (server) is each client run served, by first message.
	Clients []ClientResult `json:"clients,omitempty"`
	// JainClients (server) is Jain's index over the clients' goodput.
	JainClients *float64 `json:"jain_clients,omitempty"`
	// Poll is the transport's poll mode (multipath, gbn; "" = default).
	Poll string `json:"poll,omitempty"`
	// Latency (--lat) is the round trip statistics per message size.
	Latency []LatencyStats `json:"latency,omitempty"`
	// RateChanges (client, --egress-cap, --egress-cap-at): when the egress
	// cap was set.
	RateChanges []RateChange `json:"rate_changes,omitempty"`
	// Series (server, --series): verified goodput per bucket.
	Series *Series `json:"series,omitempty"`
	// Recovery (multipath, gbn): how the senders found their losses.
	Recovery *Recovery `json:"recovery,omitempty"`
	// EgressSeries (client, --series, multipath/gbn): the UDP payload bytes
	// of data datagrams the transport's pacers released per bucket.
	EgressSeries *Series `json:"egress_series,omitempty"`
}

// ClientResult is one client run as the server saw it.
type ClientResult struct {
	Addr              string  `json:"addr"`    // the client's address (its first connection's)
	Session           string  `json:"session"` // the run's random id, hex
	Connections       int     `json:"connections"`
	FailedConnections int     `json:"failed_connections"`
	Complete          bool    `json:"complete"` // every connection finished
	Messages          int64   `json:"messages"`
	Bytes             int64   `json:"bytes"`
	Seconds           float64 `json:"seconds"` // first message to last result
	GoodputBps        float64 `json:"goodput_bps"`
	Errors            int64   `json:"errors"`
	JainFairness      float64 `json:"jain_fairness"` // across its connections
}

// meter counts verified bytes and prints a progress line every interval:
// on the server what it verified, on the client what the server says it
// verified (kindProgress), never what was merely handed to Send.
type meter struct {
	bytes, msgs atomic.Int64
	cfg         *Config
	w           io.Writer
	start       time.Time
	mu          sync.Mutex
	peak        float64
	series      *seriesMeter // server --series
	stop        chan struct{}
	done        chan struct{}
}

func newMeter(cfg *Config, w io.Writer) *meter {
	m := &meter{cfg: cfg, w: w, stop: make(chan struct{}), done: make(chan struct{})}
	if cfg.Series > 0 && cfg.Role == RoleServer {
		m.series = &seriesMeter{width: cfg.Series}
	}
	return m
}

func (m *meter) add(n int) {
	m.bytes.Add(int64(n))
	m.msgs.Add(1)
	if m.series != nil {
		m.series.add(time.Now(), n)
	}
}

// set sets the totals (the server's verified counts, on the client).
func (m *meter) set(c counts) {
	m.bytes.Store(int64(c.bytes))
	m.msgs.Store(int64(c.messages))
}

// run prints progress until finish; start marks time zero.
func (m *meter) run(start time.Time) {
	m.start = start
	if m.series != nil {
		m.series.begin(start)
	}
	go func() {
		defer close(m.done)
		if m.cfg.Interval <= 0 {
			<-m.stop
			return
		}
		t := time.NewTicker(m.cfg.Interval)
		defer t.Stop()
		last, lastMsgs, lastT := int64(0), int64(0), start
		for {
			select {
			case <-m.stop:
				return
			case now := <-t.C:
				b, n := m.bytes.Load(), m.msgs.Load()
				dt := now.Sub(lastT).Seconds()
				bps := float64(b-last) * 8 / dt
				m.mu.Lock()
				m.peak = max(m.peak, bps)
				m.mu.Unlock()
				fmt.Fprintf(m.w, "bench: %s %6.1fs %s %s  %.0f msg/s  total %d bytes\n",
					m.cfg.Role, now.Sub(start).Seconds(), formatBW(bps, m.cfg.ReportGbits), bwUnit(m.cfg.ReportGbits),
					float64(n-lastMsgs)/dt, b)
				last, lastMsgs, lastT = b, n, now
			}
		}
	}()
}

// finish stops progress and returns the peak interval rate in bit/s.
func (m *meter) finish() float64 {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}

// formatBW formats bits/s as perftest does: Gb/sec (1e9 bits) or MB/sec
// (2^20 bytes).
func formatBW(bps float64, gbits bool) string {
	if gbits {
		return fmt.Sprintf("%.2f", bps/1e9)
	}
	return fmt.Sprintf("%.2f", bps/8/(1<<20))
}

func bwUnit(gbits bool) string {
	if gbits {
		return "Gb/sec"
	}
	return "MB/sec"
}

const rule = "---------------------------------------------------------------------------------------"

// WriteReport prints the perftest-style table and, with cfg.JSON, the
// JSON line last.
func WriteReport(w io.Writer, cfg *Config, r Result) error {
	u := bwUnit(cfg.ReportGbits)
	var b strings.Builder
	if r.Latency != nil {
		writeLatency(&b, r)
		return finishReport(w, &b, cfg, r)
	}
	fmt.Fprintln(&b, rule)
	fmt.Fprintf(&b, "                    Send BW Test (endpoint bench %s)\n", r.Role)
	fmt.Fprintf(&b, " Mode            : %s\n", r.Mode)
	fmt.Fprintf(&b, " Connections     : %d\n", r.Connections)
	fmt.Fprintf(&b, " Planes          : %d\n", r.Planes)
	fmt.Fprintf(&b, " Message size    : %d\n", r.Size)
	fmt.Fprintln(&b, rule)
	fmt.Fprintf(&b, " %-10s %-14s %-18s %-20s %s\n", "#bytes", "#iterations", "BW peak["+u+"]", "BW average["+u+"]", "MsgRate[Mpps]")
	peak := max(r.PeakBps, r.GoodputBps)
	rate := 0.0
	if r.Seconds > 0 {
		rate = float64(r.Messages) / r.Seconds / 1e6
	}
	fmt.Fprintf(&b, " %-10d %-14d %-18s %-20s %.6f\n", r.Size, r.Messages, formatBW(peak, cfg.ReportGbits), formatBW(r.GoodputBps, cfg.ReportGbits), rate)
	fmt.Fprintln(&b, rule)
	if r.Retransmits != nil {
		fmt.Fprintf(&b, " retransmits     : %d\n", *r.Retransmits)
	} else {
		fmt.Fprintf(&b, " retransmits     : unknown\n")
	}
	if r.PerPlaneBytes != nil {
		fmt.Fprintf(&b, " per-plane bytes :")
		for i, v := range r.PerPlaneBytes {
			fmt.Fprintf(&b, " p%d=%d", i, v)
		}
		fmt.Fprintln(&b)
	} else {
		fmt.Fprintf(&b, " per-plane bytes : unknown\n")
	}
	if r.IO != nil {
		fmt.Fprintf(&b, " socket I/O      : %.1f datagrams per send call, %.1f per receive call, %d dropped by the kernel\n",
			r.IO.TxPerCall, r.IO.RxPerCall, r.IO.SocketDrops)
	}
	fmt.Fprintf(&b, " verified        : %d messages, %d bytes, %d errors in %.3f s\n", r.Messages, r.Bytes, r.Errors, r.Seconds)
	fmt.Fprintf(&b, " connections     : %d failed of %d, Jain's fairness %.4f\n", r.FailedConnections, r.Connections, r.JainFairness)
	if r.Role == RoleServer {
		jc := 1.0
		if r.JainClients != nil {
			jc = *r.JainClients
		}
		fmt.Fprintf(&b, " clients         : %d, Jain's fairness %.4f\n", len(r.Clients), jc)
		if len(r.Clients) > 0 {
			fmt.Fprintf(&b, "  %-24s %-8s %-7s %-14s %-20s %-8s %s\n", "client", "#conns", "failed", "#bytes", "BW average["+u+"]", "errors", "jain")
		}
		for _, c := range r.Clients {
			done := ""
			if !c.Complete {
				done = " (incomplete)"
			}
			fmt.Fprintf(&b, "  %-24s %-8d %-7d %-14d %-20s %-8d %.4f%s\n", c.Addr, c.Connections, c.FailedConnections, c.Bytes,
				formatBW(c.GoodputBps, cfg.ReportGbits), c.Errors, c.JainFairness, done)
		}
	}
	fmt.Fprintln(&b, rule)
	return finishReport(w, &b, cfg, r)
}

func finishReport(w io.Writer, b *strings.Builder, cfg *Config, r Result) error {
	if cfg.JSON {
		j, err := json.Marshal(r)
		if err != nil {
			return err
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeLatency prints perftest's latency table (ib_send_lat), except that
// the times are whole round trips, not halved.
func writeLatency(b *strings.Builder, r Result) {
	poll := r.Poll
	if poll == "" {
		poll = "default"
	}
	fmt.Fprintln(b, rule)
	fmt.Fprintf(b, "                    Send Latency Test (endpoint bench %s)\n", r.Role)
	fmt.Fprintf(b, " Mode            : %s\n", r.Mode)
	fmt.Fprintf(b, " Poll mode       : %s\n", poll)
	fmt.Fprintf(b, " Planes          : %d\n", r.Planes)
	fmt.Fprintf(b, " Times           : round trip (ping-pong), not halved as perftest does\n")
	fmt.Fprintln(b, rule)
	fmt.Fprintf(b, " %-7s %-11s %-11s %-11s %-15s %-11s %-13s %-20s %s\n", "#bytes", "#iterations", "t_min[usec]", "t_max[usec]",
		"t_typical[usec]", "t_avg[usec]", "t_stdev[usec]", "99% percentile[usec]", "99.9% percentile[usec]")
	for _, l := range r.Latency {
		fmt.Fprintf(b, " %-7d %-11d %-11.2f %-11.2f %-15.2f %-11.2f %-13.2f %-20.2f %.2f\n", l.Bytes, l.Iterations, l.MinUs, l.MaxUs,
			l.TypicalUs, l.AvgUs, l.StdevUs, l.P99Us, l.P999Us)
	}
	fmt.Fprintln(b, rule)
	fmt.Fprintf(b, " verified        : %d messages, %d bytes, %d errors in %.3f s\n", r.Messages, r.Bytes, r.Errors, r.Seconds)
	fmt.Fprintln(b, rule)
}
