package gnmisim

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/multiplane/multiplane/fabricsim/userspace"
)

// UserspacePlane is the CounterSource of plane p of a userspace fabric: one
// port per host, named as the fabric names them ("eth1", ...). Random loss
// shows as in-errors and in-fcs-errors, egress overflow as out-discards and
// queue drops, ECN marks on the port's single queue.
func UserspacePlane(f *userspace.Fabric, plane int) CounterSource {
	return userspaceSource{f: f, plane: plane}
}

type userspaceSource struct {
	f     *userspace.Fabric
	plane int
}

func (u userspaceSource) Ports(dst []PortState) ([]PortState, error) {
	st := u.f.Stats(u.plane)
	for _, p := range st.Ports {
		c := p.Counters
		dst = append(dst, PortState{
			Name: p.Name, OperStatus: p.OperStatus, AdminState: "UP",
			Counters: Counters{
				InOctets: c.InOctets, OutOctets: c.OutOctets, InPkts: c.InPkts, OutPkts: c.OutPkts,
				InErrors: c.InErrors, InDiscards: c.InDiscards, OutDiscards: c.OutDiscards,
				InFCSErrors: c.InErrors,
			},
			Queues: []QueueCounters{{Name: DefaultQueue, ECNMarkedPkts: c.OutECNMarkedPkts, DroppedPkts: c.OutDiscards}},
		})
	}
	return dst, nil
}

// NetnsBridge is the CounterSource of a switch that is a Linux bridge in
// network namespace ns (fabricsim/netns: ns = Fabric.SwitchNS(p), devices =
// Fabric.SwitchPort(h, p) for every host h). It reads
// /sys/class/net/<dev>/{operstate,carrier_changes,statistics/*} inside the
// namespace (through `ip netns exec`, which mounts that namespace's sysfs),
// once per tick for all devices. The switch receives on a port what the host
// sends, so rx_* are in-* and tx_* are out-*. Needs root.
func NetnsBridge(ns string, devices []string) CounterSource {
	return &netnsSource{ns: ns, devices: devices}
}

type netnsSource struct {
	ns      string
	devices []string
}

var sysStats = []string{"rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_errors", "rx_dropped", "tx_dropped", "rx_crc_errors"}

func (n *netnsSource) Ports(dst []PortState) ([]PortState, error) {
	args := []string{"netns", "exec", n.ns, "grep", "-H", "."}
	for _, d := range n.devices {
		args = append(args, "/sys/class/net/"+d+"/operstate", "/sys/class/net/"+d+"/carrier_changes")
		for _, s := range sysStats {
			args = append(args, "/sys/class/net/"+d+"/statistics/"+s)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).Output()
	if len(out) == 0 && err != nil {
		return dst, fmt.Errorf("gnmisim: reading /sys/class/net in %s: %w", n.ns, err)
	}
	vals := parseSysfs(out)
	for _, d := range n.devices {
		v := vals[d]
		if v == nil {
			v = map[string]string{}
		}
		num := func(k string) uint64 { x, _ := strconv.ParseUint(v[k], 10, 64); return x }
		dst = append(dst, PortState{
			Name: d, OperStatus: operFromSysfs(v["operstate"]), AdminState: "UP",
			Counters: Counters{
				InOctets: num("rx_bytes"), OutOctets: num("tx_bytes"),
				InPkts: num("rx_packets"), OutPkts: num("tx_packets"),
				InErrors: num("rx_errors"), InDiscards: num("rx_dropped"), OutDiscards: num("tx_dropped"),
				InFCSErrors: num("rx_crc_errors"), InterfaceTransitions: num("carrier_changes"),
			},
			Queues: []QueueCounters{{Name: DefaultQueue, DroppedPkts: num("tx_dropped")}},
		})
	}
	return dst, nil
}

// parseSysfs parses `grep -H .` output: "/sys/class/net/<dev>/[statistics/]<name>:<value>".
func parseSysfs(out []byte) map[string]map[string]string {
	res := map[string]map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		file, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		rest, ok := strings.CutPrefix(file, "/sys/class/net/")
		if !ok {
			continue
		}
		dev, name, _ := strings.Cut(rest, "/")
		name = strings.TrimPrefix(name, "statistics/")
		if res[dev] == nil {
			res[dev] = map[string]string{}
		}
		res[dev][name] = strings.TrimSpace(val)
	}
	return res
}

// operFromSysfs maps RFC 2863 operstate (as sysfs spells it) to OpenConfig.
func operFromSysfs(s string) string {
	switch s {
	case "up":
		return "UP"
	case "down":
		return "DOWN"
	case "lowerlayerdown":
		return "LOWER_LAYER_DOWN"
	case "dormant":
		return "DORMANT"
	case "testing":
		return "TESTING"
	case "notpresent":
		return "NOT_PRESENT"
	}
	return "UNKNOWN"
}
