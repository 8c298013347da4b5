package abuse

import (
	"flag"
	"os"
	"time"
)

// Config sizes the benchmark. DefaultConfig is the measurement;
// Quick a smoke run of a minute or two.
type Config struct {
	FabricdBin string
	WorkDir    string // fabricd's temporary data directory is made here
	Topology   string // loaded at start (fabricd --topology)
	Keep       bool   // keep the data directory afterwards
	Seed       uint64 // of the random methods and tokens
	Quick      bool   // a smoke run: figures are not the measurement

	// Phase 1: unauthenticated requests with large paths.
	LargeRequests int   // requests sent
	PathBytes     int   // bytes of the large path segment
	Conns         int   // concurrent connections
	AuditLimit    int   // GET /api/v1/audit?limit= afterwards
	MaxDBGrowth   int64 // safety cap: stop the phase when the database grew this much
	MaxRSS        int64 // safety cap: stop when fabricd's RSS passes this

	// Phase 2: random methods.
	MethodRequests int

	// Phase 3: bad-token flood.
	Quiet        time.Duration // legitimate traffic alone
	Flood        time.Duration // legitimate traffic during the flood
	LegitClients int           // legitimate clients (one connection each)
	LegitPause   time.Duration // pause between a legitimate client's requests
	FloodClients int           // flooding clients (one connection each)

	// Phase 4: connections.
	SlowBodyLength   int           // Content-Length announced by the slow body
	SlowBodyInterval time.Duration // one byte this often
	ConnCap          time.Duration // longest a connection is watched
	IdleConns        int           // idle unauthenticated connections (bounded by RLIMIT_NOFILE)
	IdleHold         time.Duration // how many of them are still open after this long

	Sources      int           // loopback addresses (127.0.1.x) hostile traffic comes from
	PhaseTimeout time.Duration // bound of phases 1 and 2
}

// DefaultConfig is the measurement of issue 12.
func DefaultConfig() Config {
	return Config{
		FabricdBin: "bin/fabricd", WorkDir: os.TempDir(), Topology: "examples/topology.yaml", Seed: 12,
		LargeRequests: 10000, PathBytes: 500_000, Conns: 128, AuditLimit: 1000, MaxDBGrowth: 256 << 20, MaxRSS: 2 << 30,
		MethodRequests: 3000,
		Quiet:          10 * time.Second, Flood: 30 * time.Second, LegitClients: 2, LegitPause: 5 * time.Millisecond,
		FloodClients: 64, Sources: 16,
		SlowBodyLength: 1_000_000, SlowBodyInterval: 5 * time.Second, ConnCap: 120 * time.Second,
		IdleConns: 2000, IdleHold: 30 * time.Second,
		PhaseTimeout: 5 * time.Minute,
	}
}

// quick are the values --quick sets for flags not given explicitly.
var quick = map[string]string{
	"large-requests": "300", "method-requests": "300", "quiet": "2s", "flood": "3s", "flood-clients": "16",
	"conn-cap": "12s", "idle-conns": "200", "idle-hold": "12s", "phase-timeout": "1m",
}

// RegisterFlags registers every setting on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.FabricdBin, "fabricd", c.FabricdBin, "fabricd binary")
	fs.StringVar(&c.WorkDir, "work-dir", c.WorkDir, "where fabricd's temporary data directory is made")
	fs.StringVar(&c.Topology, "topology", c.Topology, "topology fabricd loads at start")
	fs.BoolVar(&c.Keep, "keep", c.Keep, "keep fabricd's data directory (and its log) afterwards")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the random methods and bearer tokens")
	fs.BoolVar(&c.Quick, "quick", c.Quick, "smoke run of about a minute: smaller counts and shorter windows for flags not given")

	fs.IntVar(&c.LargeRequests, "large-requests", c.LargeRequests, "phase 1: unauthenticated requests with a large path")
	fs.IntVar(&c.PathBytes, "path-bytes", c.PathBytes, "phase 1: bytes of the large path segment")
	fs.IntVar(&c.Conns, "conns", c.Conns, "phases 1 and 2: concurrent connections")
	fs.IntVar(&c.AuditLimit, "audit-limit", c.AuditLimit, "phase 1: limit of the GET /api/v1/audit afterwards")
	fs.Int64Var(&c.MaxDBGrowth, "max-db-growth", c.MaxDBGrowth, "phase 1 safety cap: stop when the database grew this many bytes")
	fs.Int64Var(&c.MaxRSS, "max-rss", c.MaxRSS, "phase 1 safety cap: stop when fabricd's RSS passes this many bytes")

	fs.IntVar(&c.MethodRequests, "method-requests", c.MethodRequests, "phase 2: requests with a random method")

	fs.DurationVar(&c.Quiet, "quiet", c.Quiet, "phase 3: legitimate traffic alone")
	fs.DurationVar(&c.Flood, "flood", c.Flood, "phase 3: legitimate traffic during the bad-token flood")
	fs.IntVar(&c.LegitClients, "legit-clients", c.LegitClients, "phase 3: legitimate clients (GET /api/v1/planes, admin token)")
	fs.DurationVar(&c.LegitPause, "legit-pause", c.LegitPause, "phase 3: pause between a legitimate client's requests (0: back to back)")
	fs.IntVar(&c.FloodClients, "flood-clients", c.FloodClients, "phase 3: clients sending random bearer tokens back to back")

	fs.IntVar(&c.SlowBodyLength, "slow-body-length", c.SlowBodyLength, "phase 4: Content-Length of the slow PUT")
	fs.DurationVar(&c.SlowBodyInterval, "slow-body-interval", c.SlowBodyInterval, "phase 4: the slow body sends one byte this often")
	fs.DurationVar(&c.ConnCap, "conn-cap", c.ConnCap, "phase 4: longest a connection is watched")
	fs.IntVar(&c.IdleConns, "idle-conns", c.IdleConns, "phase 4: idle unauthenticated connections (bounded by the open-file limit)")
	fs.DurationVar(&c.IdleHold, "idle-hold", c.IdleHold, "phase 4: count the idle connections still open after this long")

	fs.IntVar(&c.Sources, "sources", c.Sources, "loopback addresses 127.0.1.1.. all hostile traffic comes from (the admin and legitimate clients use 127.0.0.1)")
	fs.DurationVar(&c.PhaseTimeout, "phase-timeout", c.PhaseTimeout, "bound of phases 1 and 2")
}

// ApplyQuick sets the --quick values of the flags not given on the command
// line (or their environment twins); call it after parsing.
func (c *Config) ApplyQuick(fs *flag.FlagSet, given func(name string) bool) error {
	if !c.Quick {
		return nil
	}
	for name, v := range quick {
		if !given(name) {
			if err := fs.Set(name, v); err != nil {
				return err
			}
		}
	}
	return nil
}
