package bench

import (
	"errors"
	"flag"
	"fmt"
	"github.com/multiplane/multiplane/transport"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Mode names a transport.
type Mode string

// The modes.
const (
	ModeMultipath Mode = "multipath" // package transport, multipath spraying with selective resend
	ModeGBN       Mode = "gbn"       // package transport, RoCEv2-like go-back-N on one path
	ModeMPTCP     Mode = "mptcp"     // Linux kernel MPTCP
	ModeTCP       Mode = "tcp"       // single-path TCP on the first plane
)

// Modes lists every mode.
var Modes = []Mode{ModeMultipath, ModeGBN, ModeMPTCP, ModeTCP}

// Role is server or client.
type Role string

// The roles.
const (
	RoleServer Role = "server"
	RoleClient Role = "client"
)

// MaxConns is the most connections (-q) of a client run.
const MaxConns = 8192

// DefaultPort is the perftest default port.
const DefaultPort = 18515

// Config is the configuration of one bench run.
type Config struct {
	Role           Role
	Mode           Mode
	Bind           []netip.Addr  // local address per plane
	Peer           []netip.Addr  // server's address per plane (client)
	Port           int           // server port
	Size           int           // message size in bytes, header included (--lat: the largest)
	Sizes          []int         // --lat: the message sizes (-s list); nil = Size
	AllSizes       bool          // --lat: every power of two from 64 to Size (perftest -a)
	Latency        bool          // --lat: ping-pong round trips instead of throughput
	Duration       time.Duration // run for this long (client); wins over Iterations
	Iterations     int           // messages per connection when Duration is 0
	Conns          int           // connections (perftest -q)
	ReportGbits    bool
	JSON           bool
	ConnectTimeout time.Duration // client retries connecting this long
	Interval       time.Duration // progress line interval
	Timeout        time.Duration // server: stop after this long, failing if no client run completed (0 = never)
	Clients        int           // server: stop once this many client runs completed (0 = no limit)
	MTU            int           // multipath/gbn: link MTU, datagrams are at most MTU-28 bytes
	Poll           string        // multipath/gbn: poll mode (adaptive, busy, blocking; "" = transport default)
	EgressCap      float64       // client, multipath/gbn: egress cap per connection in bit/s from the start (0 = none)
	EgressStep     RateStep      // client, multipath/gbn: the egress cap changes at After into the run (After 0 = never)
	IngressBudget  float64       // server, multipath/gbn: receive rate in bit/s granted max-min fair to the senders (0 = none)
	Series         time.Duration // server: verified goodput in buckets of this width; client: transport egress (0 = none)
	CPUProfile     string        // write a Go CPU profile of the run to this file ("" = none)
	StartAt        time.Time     // client: start the run at this time once connected (zero = at once)
	// OnTransport, if set, is called with each transport the multipath and
	// gbn modes open (endpoint bench runs the agent on it).
	OnTransport func(*transport.Transport)
}

// RegisterFlags registers the flags with their defaults. Environment
// twins (ENDPOINT_BENCH_<FLAG>) come from internal/cliconf.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Mode = ModeMultipath
	fs.Var((*modeValue)(&c.Mode), "mode", "transport: multipath | gbn | mptcp | tcp")
	fs.Var((*addrList)(&c.Bind), "bind", "local addresses, one per plane, comma-separated (plane order)")
	fs.Var((*addrList)(&c.Peer), "peer", "client: the server's addresses, one per plane, comma-separated (plane order)")
	fs.IntVar(&c.Port, "port", DefaultPort, "server port")
	c.Size = 65536
	fs.Var((*sizeList)(c), "s", "message size in bytes, the 40-byte header included (perftest -s); --lat: a comma-separated list")
	fs.BoolVar(&c.AllSizes, "a", false, "client, --lat: every power of two from 64 bytes up to -s (perftest -a)")
	fs.BoolVar(&c.Latency, "lat", false, "client: measure round trip latency (ping-pong, one message in flight, -q 1) per message size: perftest's latency columns in microseconds of round trip; -n round trips per size, or -D per size")
	fs.Var((*seconds)(&c.Duration), "D", "client: run for this long, e.g. 10s or 10 (seconds); wins over -n (perftest -D); server: serve client runs that start within this long of the first message, then report once they end")
	fs.IntVar(&c.Iterations, "n", 5000, "client: messages per connection when -D is not given (perftest -n)")
	fs.IntVar(&c.Conns, "q", 1, "client: number of connections, run in parallel, 1..8192 (perftest -q); tcp/mptcp need a file descriptor each")
	fs.BoolVar(&c.ReportGbits, "report-gbits", false, "report bandwidth in Gb/sec instead of MB/sec (perftest --report_gbits)")
	fs.BoolVar(&c.JSON, "json", false, "print one JSON object with the result as the last line of stdout")
	fs.DurationVar(&c.ConnectTimeout, "connect-timeout", 10*time.Second, "client: keep retrying to connect this long (the server may still be starting)")
	fs.DurationVar(&c.Interval, "interval", time.Second, "progress line interval on stderr (0 = none)")
	fs.IntVar(&c.MTU, "mtu", 1500, "multipath/gbn: link MTU; datagrams carry at most MTU-28 bytes")
	fs.StringVar(&c.Poll, "poll", "", "multipath/gbn: poll mode adaptive | busy | blocking (default: the transport's, adaptive)")
	fs.DurationVar(&c.Timeout, "timeout", 0, "server: stop after this long and report; fail if no client run completed by then (0 = no limit)")
	fs.Var((*rate)(&c.EgressCap), "egress-cap", "client, multipath/gbn: cap each connection's egress at this rate from the start, bits/s with K, M or G, e.g. 600M (transport.SetRates, as a rate policy does; 0 = none)")
	fs.Var((*rateStep)(&c.EgressStep), "egress-cap-at", "client, multipath/gbn: DURATION:RATE, change the egress cap that long into the run, e.g. 3s:300M; --json reports when (rate_changes)")
	fs.Var((*rate)(&c.IngressBudget), "ingress-budget", "server, multipath/gbn: the receive rate, bits/s with K, M or G, that the server grants its senders max-min fair (per client endpoint, then per connection) in every ACK; datagram bytes, so for a line of L bit/s at MTU M, L*(M-28)/(M+14) (0 = none)")
	fs.DurationVar(&c.Series, "series", 0, "server: record verified goodput in buckets of this width from the first message, e.g. 10ms (series); client, multipath/gbn: the bytes its transport's pacers release, measured where rate caps act (egress_series); --json reports them")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a Go CPU profile of the run to this file (go tool pprof reads it)")
	fs.Var((*startTime)(&c.StartAt), "start-at", "client: once connected, start the run (-D, -n) at this time, Unix seconds (e.g. 1733338000.5) or RFC 3339, so that several clients' runs overlap whole and a server's aggregate covers only time when all of them send; a client connected late starts at once and says so (default: start when connected)")
	fs.IntVar(&c.Clients, "clients", 0, "server: report and exit once this many client runs completed (0 = serve until -D ends or interrupted)")
}

// ErrUsage is wrapped by configuration errors.
var ErrUsage = errors.New("bench: usage")

// Validate checks the configuration for role.
func (c *Config) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrUsage}, a...)...) }
	switch {
	case c.Role != RoleServer && c.Role != RoleClient:
		return bad("role %q: want server or client", c.Role)
	case !slices.Contains(Modes, c.Mode):
		return bad("--mode %q: want one of multipath, gbn, mptcp, tcp", c.Mode)
	case len(c.Bind) == 0:
		return bad("--bind: at least one local address")
	case c.Role == RoleClient && len(c.Peer) == 0:
		return bad("--peer: the server's addresses are needed by the client")
	case c.Role == RoleClient && len(c.Peer) != len(c.Bind):
		return bad("--bind has %d addresses and --peer %d: give one per plane on both", len(c.Bind), len(c.Peer))
	case c.Port < 1 || c.Port > 65535:
		return bad("--port %d", c.Port)
	case c.Size < HeaderLen || c.Size > MaxMessage:
		return bad("-s %d: want %d..%d", c.Size, HeaderLen, MaxMessage)
	case len(c.Sizes) > 1 && !c.Latency:
		return bad("-s %v: a list of sizes needs --lat", c.Sizes)
	case c.Latency && c.Role == RoleClient && c.Conns != 1:
		return bad("--lat: -q %d: latency runs one connection", c.Conns)
	case c.AllSizes && c.Size < 64:
		return bad("-a: -s %d is below 64", c.Size)
	case c.Clients < 0:
		return bad("--clients %d: want 0 (no limit) or more", c.Clients)
	case c.Duration < 0 || (c.Duration == 0 && c.Iterations < 1):
		return bad("-D %v / -n %d: give a positive duration or iteration count", c.Duration, c.Iterations)
	case c.MTU != 0 && (c.MTU < 576 || c.MTU > 65535):
		return bad("--mtu %d: want 576..65535", c.MTU)
	case c.Conns < 1 || c.Conns > MaxConns:
		return bad("-q %d: want 1..%d", c.Conns, MaxConns)
	case (c.EgressCap > 0 || c.EgressStep.After > 0) && (c.Role != RoleClient || (c.Mode != ModeMultipath && c.Mode != ModeGBN)):
		return bad("--egress-cap and --egress-cap-at: client of mode multipath or gbn only")
	case c.IngressBudget > 0 && (c.Role != RoleServer || (c.Mode != ModeMultipath && c.Mode != ModeGBN)):
		return bad("--ingress-budget: server of mode multipath or gbn only")
	case c.EgressStep.After > 0 && c.Duration > 0 && c.EgressStep.After >= c.Duration:
		return bad("--egress-cap-at %v: after the run's -D %v", c.EgressStep.After, c.Duration)
	case c.Series < 0 || (c.Series > 0 && c.Series < time.Millisecond):
		return bad("--series %v: a bucket width of 1ms or more", c.Series)
	case c.Series > 0 && c.Role == RoleClient && (c.Latency || (c.Mode != ModeMultipath && c.Mode != ModeGBN)):
		return bad("--series on a client: throughput runs of mode multipath or gbn only")
	case !c.StartAt.IsZero() && c.Role != RoleClient:
		return bad("--start-at: client only")
	case !c.StartAt.IsZero() && time.Until(c.StartAt) > maxStartDelay:
		return bad("--start-at %s: more than %v ahead", c.StartAt.Format(time.RFC3339Nano), maxStartDelay)
	}
	return nil
}

// maxStartDelay bounds how far ahead --start-at may be: further is a
// mistake (a clock or unit error), not a plan.
const maxStartDelay = time.Hour

// startTime is --start-at: Unix seconds or RFC 3339.
type startTime time.Time

func (t *startTime) String() string {
	if t == nil || time.Time(*t).IsZero() {
		return ""
	}
	return time.Time(*t).Format(time.RFC3339Nano)
}

func (t *startTime) Set(v string) error {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if f <= 0 {
			return fmt.Errorf("%q: Unix seconds must be positive", v)
		}
		sec, frac := math.Modf(f)
		*t = startTime(time.Unix(int64(sec), int64(frac*1e9)))
		return nil
	}
	x, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return fmt.Errorf("%q: want Unix seconds or RFC 3339 (2026-12-04T21:30:00Z)", v)
	}
	*t = startTime(x)
	return nil
}

// sizeList is -s: one size, or (--lat) a comma-separated list; Size is
// the largest.
type sizeList Config

func (l *sizeList) String() string {
	if l == nil {
		return ""
	}
	if len(l.Sizes) == 0 {
		return strconv.Itoa(l.Size)
	}
	s := make([]string, len(l.Sizes))
	for i, n := range l.Sizes {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l *sizeList) Set(v string) error {
	l.Sizes, l.Size = nil, 0
	for part := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil {
			return err
		}
		if n < HeaderLen || n > MaxMessage {
			return fmt.Errorf("size %d: want %d..%d", n, HeaderLen, MaxMessage)
		}
		l.Sizes = append(l.Sizes, n)
		l.Size = max(l.Size, n)
	}
	return nil
}

// latencySizes is the message sizes of a --lat run.
func (c *Config) latencySizes() []int {
	if c.AllSizes {
		var s []int
		for n := 64; n <= c.Size; n *= 2 {
			s = append(s, n)
		}
		return s
	}
	if len(c.Sizes) > 0 {
		return c.Sizes
	}
	return []int{c.Size}
}

type modeValue Mode

func (m *modeValue) String() string { return string(*m) }
func (m *modeValue) Set(s string) error {
	if !slices.Contains(Modes, Mode(s)) {
		return fmt.Errorf("unknown mode %q (multipath, gbn, mptcp, tcp)", s)
	}
	*m = modeValue(s)
	return nil
}

type addrList []netip.Addr

func (l *addrList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, a := range *l {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

func (l *addrList) Set(v string) error {
	*l = nil
	for part := range strings.SplitSeq(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		a, err := netip.ParseAddr(part)
		if err != nil {
			return err
		}
		*l = append(*l, a)
	}
	return nil
}

// seconds is a duration flag that also takes a bare number of seconds
// ("10"), as perftest's -D does.
type seconds time.Duration

func (d *seconds) String() string { return time.Duration(*d).String() }
func (d *seconds) Set(v string) error {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		*d = seconds(f * float64(time.Second))
		return nil
	}
	x, err := time.ParseDuration(v)
	*d = seconds(x)
	return err
}
