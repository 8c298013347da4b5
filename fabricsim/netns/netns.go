package netns

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Config describes a namespace fabric.
type Config struct {
	// Name prefixes every namespace (default "mpfab-<pid>"). Keep it short
	// and unique: it is how CleanupStale and Close find what is theirs.
	Name string
	// Hosts is the number of hosts (1..254).
	Hosts int
	// Planes configures each plane; its length is the number of planes (1..250).
	Planes []PlaneConfig
	// MTU of every link (default 1500).
	MTU int
	// Logger receives progress; nil discards.
	Logger *slog.Logger
}

// PlaneConfig describes one plane.
type PlaneConfig struct {
	// RateBps shapes each switch port towards a host (tbf); 0 = unshaped.
	RateBps int64
	// QueueBytes is the tbf limit (bytes queued before drop-tail); 0 picks
	// 5 ms of RateBps, at least 64 KiB.
	QueueBytes int
	// BurstBytes is the tbf bucket; 0 picks 1 ms of RateBps, at least 4 MTU.
	BurstBytes int
	// Loss is the probability (0..1) that the switch drops a frame.
	Loss float64
}

var (
	// ErrConfig is wrapped by configuration errors.
	ErrConfig = errors.New("netns: invalid config")
	// ErrCommand is wrapped by failures of ip, tc, nft or ethtool.
	ErrCommand = errors.New("netns: command failed")
)

// Fabric is a running namespace fabric.
type Fabric struct {
	cfg    Config
	log    *slog.Logger
	mu     sync.Mutex
	closed bool
	made   []string // namespaces created, deleted by Close
}

// Start creates the namespaces, links, bridges, shapers and loss rules. On
// error, everything created so far is deleted.
func Start(ctx context.Context, cfg Config) (*Fabric, error) {
	if cfg.Name == "" {
		cfg.Name = fmt.Sprintf("mpfab-%d", os.Getpid())
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.Hosts < 1 || cfg.Hosts > 254:
		return nil, fmt.Errorf("%w: Hosts %d not in 1..254", ErrConfig, cfg.Hosts)
	case len(cfg.Planes) < 1 || len(cfg.Planes) > 250:
		return nil, fmt.Errorf("%w: %d planes", ErrConfig, len(cfg.Planes))
	case cfg.MTU < 576 || cfg.MTU > 65535:
		return nil, fmt.Errorf("%w: MTU %d", ErrConfig, cfg.MTU)
	case !validName.MatchString(cfg.Name):
		return nil, fmt.Errorf("%w: Name %q (letters, digits, '-', at most 32)", ErrConfig, cfg.Name)
	}
	cfg.Planes = append([]PlaneConfig(nil), cfg.Planes...)
	for i, p := range cfg.Planes {
		if p.RateBps < 0 || p.Loss < 0 || p.Loss > 1 || p.QueueBytes < 0 || p.BurstBytes < 0 {
			return nil, fmt.Errorf("%w: plane %d: %+v", ErrConfig, i, p)
		}
	}
	f := &Fabric{cfg: cfg, log: cfg.Logger.With("component", "fabricsim-netns", "name", cfg.Name)}
	if err := f.build(ctx); err != nil {
		_ = f.Close()
		return nil, err
	}
	f.log.Info("fabric started", "hosts", cfg.Hosts, "planes", len(cfg.Planes), "mtu", cfg.MTU)
	return f, nil
}

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,31}$`)

// HostNS is the namespace of host h.
func (f *Fabric) HostNS(h int) string { return fmt.Sprintf("%s-h%d", f.cfg.Name, h) }

// SwitchNS is the namespace of plane p's switch.
func (f *Fabric) SwitchNS(p int) string { return fmt.Sprintf("%s-s%d", f.cfg.Name, p) }

// Hosts is the number of hosts.
func (f *Fabric) Hosts() int { return f.cfg.Hosts }

// Planes is the number of planes.
func (f *Fabric) Planes() int { return len(f.cfg.Planes) }

// MTU is the links' MTU.
func (f *Fabric) MTU() int { return f.cfg.MTU }

// Addr is host h's address on plane p: 10.77.<p>.<h+1>.
func (f *Fabric) Addr(h, p int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 77, byte(p), byte(h + 1)})
}

// Iface is the name of host h's interface on plane p, inside HostNS(h).
func (f *Fabric) Iface(h, p int) string { return fmt.Sprintf("p%d", p) }

// SwitchPort is the name of the switch port towards host h, inside SwitchNS(p).
func (f *Fabric) SwitchPort(h, p int) string { return fmt.Sprintf("h%d", h) }

func (f *Fabric) build(ctx context.Context) error {
	mtu := strconv.Itoa(f.cfg.MTU)
	addNS := func(ns string) error {
		if err := f.run(ctx, "", "ip", "netns", "add", ns); err != nil {
			return err
		}
		f.made = append(f.made, ns)
		for _, c := range [][]string{
			{"ip", "link", "set", "lo", "up"},
			{"sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"},
			{"sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"},
		} {
			if err := f.run(ctx, ns, c[0], c[1:]...); err != nil {
				return err
			}
		}
		return nil
	}
	for h := range f.cfg.Hosts {
		if err := addNS(f.HostNS(h)); err != nil {
			return err
		}
	}
	for p := range f.cfg.Planes {
		sw := f.SwitchNS(p)
		if err := addNS(sw); err != nil {
			return err
		}
		steps := [][]string{
			{"ip", "link", "add", "br0", "mtu", mtu, "type", "bridge", "stp_state", "0", "forward_delay", "0"},
			{"ethtool", "-K", "br0", "tso", "off", "gso", "off", "gro", "off"},
			{"ip", "link", "set", "br0", "up"},
		}
		for _, c := range steps {
			if err := f.run(ctx, sw, c[0], c[1:]...); err != nil {
				return err
			}
		}
		for h := range f.cfg.Hosts {
			hn, hi, si := f.HostNS(h), f.Iface(h, p), f.SwitchPort(h, p)
			if err := f.run(ctx, "", "ip", "link", "add", hi, "netns", hn, "mtu", mtu, "type", "veth",
				"peer", "name", si, "netns", sw, "mtu", mtu); err != nil {
				return err
			}
			for _, c := range []struct {
				ns   string
				args []string
			}{
				{sw, []string{"ethtool", "-K", si, "tso", "off", "gso", "off", "gro", "off"}},
				{sw, []string{"ip", "link", "set", si, "master", "br0", "up"}},
				{hn, []string{"ethtool", "-K", hi, "tso", "off", "gso", "off", "gro", "off"}},
				{hn, []string{"ip", "addr", "add", f.Addr(h, p).String() + "/24", "dev", hi}},
				{hn, []string{"ip", "link", "set", hi, "up"}},
			} {
				if err := f.run(ctx, c.ns, c.args[0], c.args[1:]...); err != nil {
					return err
				}
			}
			if err := f.shape(ctx, h, p); err != nil {
				return err
			}
		}
		if err := f.setLossRule(ctx, p, f.cfg.Planes[p].Loss, true); err != nil {
			return err
		}
	}
	return nil
}

// shape installs (or replaces, or removes) the tbf towards host h on plane p.
func (f *Fabric) shape(ctx context.Context, h, p int) error {
	pc := f.cfg.Planes[p]
	sw, dev := f.SwitchNS(p), f.SwitchPort(h, p)
	if pc.RateBps == 0 {
		// Remove any shaper; "no qdisc" is not an error here.
		_ = f.run(ctx, sw, "tc", "qdisc", "del", "dev", dev, "root")
		return nil
	}
	burst := pc.BurstBytes
	if burst == 0 {
		burst = max(int(pc.RateBps/8/1000), 4*f.cfg.MTU)
	}
	limit := pc.QueueBytes
	if limit == 0 {
		limit = max(int(pc.RateBps/8*5/1000), 64<<10)
	}
	return f.run(ctx, sw, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
		"rate", strconv.FormatInt(pc.RateBps, 10)+"bit",
		"burst", strconv.Itoa(burst), "limit", strconv.Itoa(limit))
}

// lossThreshold is N in "numgen random mod 1000000 < N".
func lossThreshold(loss float64) int { return int(loss*1e6 + 0.5) }

func (f *Fabric) setLossRule(ctx context.Context, p int, loss float64, create bool) error {
	var b strings.Builder
	if create {
		b.WriteString("table bridge multiplane {\n chain loss {\n  type filter hook forward priority 0; policy accept;\n }\n}\n")
	}
	b.WriteString("flush chain bridge multiplane loss\n")
	// The rule is there even at 0% loss, so its counter is always readable.
	fmt.Fprintf(&b, "add rule bridge multiplane loss numgen random mod 1000000 < %d counter drop\n", lossThreshold(loss))
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", f.SwitchNS(p), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: nft in %s: %v: %s", ErrCommand, f.SwitchNS(p), err, bytes.TrimSpace(out))
	}
	return nil
}

// SetLoss sets plane p's random loss (0..1).
func (f *Fabric) SetLoss(ctx context.Context, p int, loss float64) error {
	if loss < 0 || loss > 1 {
		return fmt.Errorf("%w: loss %v", ErrConfig, loss)
	}
	if err := f.setLossRule(ctx, p, loss, false); err != nil {
		return err
	}
	f.mu.Lock()
	f.cfg.Planes[p].Loss = loss
	f.mu.Unlock()
	return nil
}

// LossDrops is how many frames plane p's loss rule dropped since it was last
// set.
func (f *Fabric) LossDrops(ctx context.Context, p int) (uint64, error) {
	out, err := f.output(ctx, f.SwitchNS(p), "nft", "-j", "list", "chain", "bridge", "multiplane", "loss")
	if err != nil {
		return 0, err
	}
	var doc struct {
		Nftables []struct {
			Rule *struct {
				Expr []struct {
					Counter *struct {
						Packets uint64 `json:"packets"`
					} `json:"counter"`
				} `json:"expr"`
			} `json:"rule"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return 0, fmt.Errorf("netns: nft json: %w", err)
	}
	var n uint64
	for _, it := range doc.Nftables {
		if it.Rule == nil {
			continue
		}
		for _, e := range it.Rule.Expr {
			if e.Counter != nil {
				n += e.Counter.Packets
			}
		}
	}
	return n, nil
}

// SetRate reshapes every switch port of plane p to bps (0 removes shaping).
func (f *Fabric) SetRate(ctx context.Context, p int, bps int64) error {
	if bps < 0 {
		return fmt.Errorf("%w: rate %d", ErrConfig, bps)
	}
	f.mu.Lock()
	f.cfg.Planes[p].RateBps = bps
	f.mu.Unlock()
	for h := range f.cfg.Hosts {
		if err := f.shape(ctx, h, p); err != nil {
			return err
		}
	}
	return nil
}

// SetLinkUp brings host h's link to plane p up or down (ip link set on the
// host side of the veth; the peer follows).
func (f *Fabric) SetLinkUp(ctx context.Context, h, p int, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return f.run(ctx, f.HostNS(h), "ip", "link", "set", f.Iface(h, p), state)
}

// LinkCounters are an interface's kernel counters.
type LinkCounters struct {
	RxBytes   uint64 `json:"rx_bytes"`
	TxBytes   uint64 `json:"tx_bytes"`
	RxPackets uint64 `json:"rx_packets"`
	TxPackets uint64 `json:"tx_packets"`
	RxDropped uint64 `json:"rx_dropped"`
	TxDropped uint64 `json:"tx_dropped"`
}

// Counters reads host h's interface counters on plane p.
func (f *Fabric) Counters(ctx context.Context, h, p int) (LinkCounters, error) {
	out, err := f.output(ctx, f.HostNS(h), "ip", "-j", "-s", "link", "show", "dev", f.Iface(h, p))
	if err != nil {
		return LinkCounters{}, err
	}
	var links []struct {
		Stats struct {
			Rx struct{ Bytes, Packets, Dropped uint64 } `json:"rx"`
			Tx struct{ Bytes, Packets, Dropped uint64 } `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		return LinkCounters{}, fmt.Errorf("netns: ip -j link: %v", err)
	}
	s := links[0].Stats
	return LinkCounters{s.Rx.Bytes, s.Tx.Bytes, s.Rx.Packets, s.Tx.Packets, s.Rx.Dropped, s.Tx.Dropped}, nil
}

// ShaperCounters are the packets a switch port's shaper (tbf) sent and
// dropped (queue full) since the fabric started.
type ShaperCounters struct {
	Packets uint64 `json:"packets"`
	Drops   uint64 `json:"drops"`
}

// Shaper reads the shaper counters of plane p's switch port towards host h
// (zero when the plane is unshaped).
func (f *Fabric) Shaper(ctx context.Context, h, p int) (ShaperCounters, error) {
	out, err := f.output(ctx, f.SwitchNS(p), "tc", "-s", "-j", "qdisc", "show", "dev", f.SwitchPort(h, p))
	if err != nil {
		return ShaperCounters{}, err
	}
	var qs []struct {
		Kind    string `json:"kind"`
		Root    bool   `json:"root"`
		Packets uint64 `json:"packets"`
		Drops   uint64 `json:"drops"`
	}
	if err := json.Unmarshal(out, &qs); err != nil {
		return ShaperCounters{}, fmt.Errorf("netns: tc -j qdisc: %w", err)
	}
	for _, q := range qs {
		if q.Root && q.Kind == "tbf" {
			return ShaperCounters{Packets: q.Packets, Drops: q.Drops}, nil
		}
	}
	return ShaperCounters{}, nil
}

// Command returns a command that runs name in host h's namespace.
func (f *Fabric) Command(ctx context.Context, h int, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", f.HostNS(h), name}, args...)...)
}

// Exec runs name in host h's namespace and returns its combined output.
func (f *Fabric) Exec(ctx context.Context, h int, name string, args ...string) ([]byte, error) {
	out, err := f.Command(ctx, h, name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%w: %s %s in %s: %v: %s", ErrCommand, name, strings.Join(args, " "), f.HostNS(h), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// Do runs fn on an OS thread switched into host h's namespace. Sockets fn
// opens belong to that namespace and stay there after Do returns. fn must
// not start goroutines that expect to be in the namespace.
func (f *Fabric) Do(h int, fn func() error) error {
	return doIn("/run/netns/"+f.HostNS(h), fn)
}

func doIn(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: %w", err)
			return
		}
		defer orig.Close()
		target, err := os.Open(path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: %w", err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: setns %s: %w", path, err)
			return
		}
		ferr := fn()
		// Only a thread back in its own namespace returns to the pool;
		// otherwise it ends with this goroutine, still locked.
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

// Close deletes every namespace of the fabric (and with them every link,
// bridge, qdisc and rule). It is safe to call more than once.
func (f *Fabric) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	var errs []error
	for i := len(f.made) - 1; i >= 0; i-- {
		if err := f.run(context.Background(), "", "ip", "netns", "del", f.made[i]); err != nil {
			errs = append(errs, err)
		}
	}
	f.log.Info("fabric deleted", "namespaces", len(f.made))
	return errors.Join(errs...)
}

var staleName = regexp.MustCompile(`^mpfab-(\d+)-[hs]\d+$`)

// CleanupStale deletes namespaces named by the default scheme
// ("mpfab-<pid>-h<n>", "mpfab-<pid>-s<n>") whose process no longer exists.
// It never touches any other namespace. It returns the names deleted.
func CleanupStale(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("%w: ip netns list: %v", ErrCommand, err)
	}
	var deleted []string
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		m := staleName.FindStringSubmatch(fields[0])
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if pid == os.Getpid() || unix.Kill(pid, 0) == nil || errors.Is(unix.Kill(pid, 0), unix.EPERM) {
			continue
		}
		if err := exec.CommandContext(ctx, "ip", "netns", "del", fields[0]).Run(); err == nil {
			deleted = append(deleted, fields[0])
		}
	}
	return deleted, nil
}

func (f *Fabric) run(ctx context.Context, ns, name string, args ...string) error {
	_, err := f.output(ctx, ns, name, args...)
	return err
}

func (f *Fabric) output(ctx context.Context, ns, name string, args ...string) ([]byte, error) {
	argv := append([]string{name}, args...)
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%w: %s: %v: %s", ErrCommand, strings.Join(argv, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}
