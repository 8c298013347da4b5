// Package telemetry collects gNMI telemetry from the fabric's switches and
// turns it into the signals the health engine observes (planes.Observer).
//
// A Collector keeps one Subscribe stream per switch of the topology (STREAM
// mode: ON_CHANGE for oper-status, SAMPLE every Config.SampleInterval for
// the interface counters and the QoS output-queue counters), over TLS, mTLS
// or plaintext, with username/password metadata when the topology names
// them (the password comes from the environment variable the topology
// names, and is never logged).
//
// A stream is dead when it ends, when nothing arrives for
// Config.SilenceTimeout (a stalled target with its TCP connection still
// open), or when gRPC keepalive pings go unanswered; it is then reopened
// with exponential backoff and jitter. Every change of a switch's stream
// state (up, synced, down with a reason) is a planes.SwitchReachability.
// The collector never makes up an oper-status: a switch whose stream is
// down is only unreachable, and the health engine decides what that means
// for its links.
//
// Counters become per-second rates from the deltas between a switch's own
// timestamps. A uint64 wrap gives the true increase; a value lower than
// before that is no plausible wrap (a reboot), a jump above Config.MaxRate,
// and the first values of a new stream give no rate for that interval.
// Updates older than the last one are ignored, unknown paths and interfaces
// not in the topology are ignored, and values of the wrong type are counted
// (multiplane_telemetry_errors_total{kind="type_mismatch"}) and logged once
// per switch and path. The observer gets one batch per notification: an
// interface's oper-status when it is reported, and its rates whenever its
// interface counters are (queue counters, ECN marks and drops summed over
// the output queues, ride along with the next interface counters; with a
// target that sends one leaf per notification, each leaf gives a sample
// with the latest rates of all counters).
//
// Metrics (Collector.Register), namespace multiplane, subsystem telemetry:
// switch_connected{switch} and switch_synced{switch} (0/1),
// updates_total{switch} (leaves received), reconnects_total{switch},
// errors_total{kind} (connect, stream, silent, auth, type_mismatch, stale,
// counter_reset), samples_total and batches_total (handed to the observer).
// A switch's series go away when Reconcile removes it.
//
// Use:
//
//	col, err := telemetry.New(cfg, engine, logger) // cfg.RegisterFlags(fs) beforehand
//	if err != nil { ... }
//	if err := col.Register(prometheus.DefaultRegisterer); err != nil { ... }
//	col.Reconcile(topology)  // again whenever the topology changes
//	go col.Run(ctx)          // until ctx ends
package telemetry
