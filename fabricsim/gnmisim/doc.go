// Package gnmisim runs emulated gNMI switch targets for tests, benchmarks and
// the demo. Each [Switch] is OpenConfig's reference Subscribe server
// (github.com/openconfig/gnmi/subscribe) over a [cache.Cache] holding one
// target, listening on its own loopback TCP address.
//
// A switch publishes, for every port its [CounterSource] reports:
//
//	/interfaces/interface[name=X]/state/{oper-status,admin-status}
//	/interfaces/interface[name=X]/state/counters/{in-octets,out-octets,in-pkts,out-pkts,
//	    in-errors,in-discards,out-discards,in-fcs-errors,interface-transitions}
//	/qos/interfaces/interface[interface-id=X]/output/queues/queue[name=Q]/state/{ecn-marked-pkts,dropped-pkts}
//
// Counters are read from the source every [Config.Tick] and published as one
// atomic notification per port (prefix .../state/counters) and one per queue,
// so a subscriber sees every counter container once per tick even when the
// fabric is idle (which doubles as a liveness signal). Oper-status and
// admin-status are published on change only, and an oper-status change is
// pushed as soon as it is seen: SetOperStatus pushes at once, and with
// [Config.OperPoll] the source's oper-status is polled more often than the
// counters.
//
// Subscriptions with or without a target in the prefix are accepted: an
// empty target means this switch. Clients subscribe to containers or leaves
// with wildcard keys, e.g. interfaces/interface[name=*]/state/counters.
//
// Counter sources: [UserspacePlane] adapts a fabricsim/userspace plane,
// [NetnsBridge] reads the bridge-port counters of a fabricsim/netns switch
// namespace from /sys/class/net, [Synthetic] makes traffic up for benchmarks.
//
// For tests the switch is programmable: [Switch.SetOperStatus],
// [Switch.SetCounter] and [Switch.AddCounter] (wrap at 2^64),
// [Switch.ResetCounters] (a reboot's counters), [Switch.Restart] (new
// streams, counters reset), [Switch.Stop]/[Switch.Resume] for an outage,
// [Switch.Stall]/[Switch.Unstall] (streams go silent, TCP stays open) and
// [Switch.PublishGarbage] (wrong value types). A [Fleet] runs many switches
// cheaply and describes them as a planes.Topology.
//
//	sw, err := gnmisim.Start(gnmisim.Config{Name: "sw1", Source: gnmisim.Synthetic(4, 1e6)})
//	if err != nil { ... }
//	defer sw.Close()
//	fmt.Println(sw.Addr()) // 127.0.0.1:port
package gnmisim
