// Command endpoint is the Multiplane endpoint: the agent that applies path
// sets and rate policies to the transport (`endpoint run`) and a
// perftest-style transport benchmark (`endpoint bench`).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/multiplane/multiplane/agent"
	"github.com/multiplane/multiplane/bench"
	"github.com/multiplane/multiplane/internal/cliconf"
	"github.com/multiplane/multiplane/internal/version"
)

const usage = `Usage: endpoint <command> [arguments]

Commands:
  bench server|client [flags]  perftest-style transport benchmark (endpoint bench --help)
  enroll [flags]               enroll this host with fabricd (endpoint enroll --help)
  run [flags]                  the endpoint agent (endpoint run --help)
  --version                    print the version (module version and commit)
`

const benchUsage = `Usage: endpoint bench server|client [flags]

A perftest-style (ib_send_bw) throughput benchmark. Start the server, then
the client with the server's per-plane addresses:

  endpoint bench server --mode mptcp --bind 10.77.0.2,10.77.1.2,10.77.2.2,10.77.3.2
  endpoint bench client --mode mptcp --bind 10.77.0.1,10.77.1.1,10.77.2.1,10.77.3.1 \
      --peer 10.77.0.2,10.77.1.2,10.77.2.2,10.77.3.2 -s 65536 -D 10 --report-gbits --json

Modes: multipath (package transport, sprayed over every plane), gbn (its
go-back-N single-path baseline), mptcp (Linux kernel MPTCP; subflows come from
"ip mptcp endpoint" and "ip mptcp limits" set up outside), tcp (one TCP
connection on the first plane).

Every message carries a CRC32C and a sequence number and is verified by the
server; a corrupt, duplicate or missing message makes both sides exit 1, and
so does a failed connection (the other connections still run to the end).

The server serves any number of clients at once and reports each (by address)
and the aggregate. It stops once --clients runs have completed, or, with -D,
when the runs that started within -D of its first message have ended, or
when interrupted (SIGINT/SIGTERM) or at --timeout; without any of these it
serves until interrupted.

Progress goes to stderr every --interval; the table to stdout; with --json
one JSON object is the last line of stdout:
  {"mode","role","goodput_bps","peak_bps","bytes","seconds","messages","size",
   "retransmits","connections","planes","per_plane_bytes","errors",
   "failed_connections","per_connection_bytes","jain_fairness",
   "clients" (server: [{"addr","session","connections","failed_connections",
   "complete","messages","bytes","seconds","goodput_bps","errors",
   "jain_fairness"}]),"jain_clients" (server: across clients' goodput)}
retransmits and per_plane_bytes are null when unknown.

With --lat the client measures round trips instead (ping-pong, one message in
flight, -q 1), per message size (-s list, or -a for every power of two from
64 bytes up to -s), and prints perftest's latency columns (#bytes #iterations
t_min t_max t_typical t_avg t_stdev 99% 99.9%, microseconds of round trip,
not halved as perftest does); --json adds "poll" and "latency": [{"bytes",
"iterations","t_min_us","t_max_us","t_typical_us","t_avg_us","t_stdev_us",
"p99_us","p99_9_us"}]. Compare poll modes by running it once per --poll, and
against tcp/mptcp with --mode:
  endpoint bench client --lat -a -s 65536 -n 5000 --poll busy --bind ... --peer ... For tcp and mptcp,
retransmits are the namespace's Tcp RetransSegs and per-plane bytes the
interface counters of the bind addresses (unknown on loopback).

Exit status: 0 on success, 1 on a failed or unverified run, 2 on usage errors.

`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "bench":
		return runBench(args[1:], stdout, stderr)
	case "run":
		return runAgent(args[1:], stdout, stderr)
	case "enroll":
		return runEnroll(args[1:], stdout, stderr)
	case "-version", "--version", "version":
		fmt.Fprintln(stdout, "endpoint", version.Get())
		return 0
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "endpoint: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func runBench(args []string, stdout, stderr io.Writer) int {
	isHelp := func(a string) bool { return a == "-h" || a == "-help" || a == "--help" || a == "help" }
	if len(args) == 0 || isHelp(args[0]) || slices.ContainsFunc(args, isHelp) {
		w := stderr
		code := 2
		if len(args) > 0 && slices.ContainsFunc(args, isHelp) {
			w, code = stdout, 0
		}
		fmt.Fprint(w, benchUsage)
		fs := flag.NewFlagSet("endpoint bench server|client", flag.ContinueOnError)
		fs.SetOutput(w)
		new(bench.Config).RegisterFlags(fs)
		registerBenchAgentFlags(fs, new(agent.Config))
		_ = cliconf.Parse(fs, []string{"-help"}, "ENDPOINT_BENCH")
		return code
	}
	var cfg bench.Config
	var acfg agent.Config
	cfg.Role = bench.Role(args[0])
	if cfg.Role != bench.RoleServer && cfg.Role != bench.RoleClient {
		fmt.Fprintf(stderr, "endpoint bench: want server or client, got %q\n\n%s", args[0], benchUsage)
		return 2
	}
	fs := flag.NewFlagSet("endpoint bench "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.RegisterFlags(fs)
	registerBenchAgentFlags(fs, &acfg)
	if err := cliconf.Parse(fs, args[1:], "ENDPOINT_BENCH"); err != nil {
		fmt.Fprintln(stderr, "endpoint bench:", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "endpoint bench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	wait, err := withAgent(ctx, &cfg, acfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "endpoint bench:", err)
		return 2
	}
	defer wait()
	_, err = bench.Run(ctx, cfg, stdout, stderr)
	switch {
	case errors.Is(err, bench.ErrUsage):
		fmt.Fprintln(stderr, "endpoint bench:", err)
		return 2
	case err != nil:
		fmt.Fprintln(stderr, "endpoint bench:", err)
		return 1
	}
	return 0
}
