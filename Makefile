# Multiplane: `make demo` runs the control plane with the example fabric;
# `make test` runs every test. Both install what is missing first.
GO          ?= go
BIN         := bin
GOFLAGS_TEST ?= -count=1 -timeout 30m
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all build test check-large-files demo run-fabricd bench-transport bench-transport-smoke bench-relay bench-telemetry bench-convergence bench-abuse lint deps-demo deps-test fuzz clean bench-transport

all: build

deps-demo:
	@scripts/deps.sh demo

deps-test:
	@scripts/deps.sh test

build:
	$(GO) build -o $(BIN)/ ./cmd/...

test: deps-test check-large-files
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) test $(GOFLAGS_TEST) ./...

# Tracked files over 1 MiB fail unless listed in scripts/large-files.allow.
check-large-files:
	@scripts/check-large-files

lint:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) run $(STATICCHECK) ./...

# demo: a userspace fabric with gNMI switches, fabricd (private PostgreSQL and
# embedded etcd under ./var), endpoint agents and traffic; a plane fails and
# recovers on the way. Ctrl-C stops everything; running it again keeps the data.
demo: deps-demo build
	@exec $(BIN)/demo --data-dir var --fabricd $(BIN)/fabricd

# fabricd alone with the example topology (its switches are not emulated).
run-fabricd: deps-demo build
	@exec $(BIN)/fabricd --data-dir var --topology examples/topology.yaml

# Transport suite on a network-namespace fabric (root; about 17 minutes);
# BENCH_TRANSPORT_ARGS passes flags (scripts/bench-transport --help).
bench-transport: deps-test
	scripts/bench-transport $(BENCH_TRANSPORT_ARGS)

bench-transport-smoke: deps-test
	scripts/bench-transport --runs 1 --duration 2s --out $${TMPDIR:-/tmp}/bench-transport

# Capacity of the userspace plane relays.
bench-relay:
	$(GO) test -run '^$$' -bench Relay -benchtime 3s ./fabricsim/userspace/

# Whole-system benchmarks against the real fabricd; results in docs/benchmarks/.
bench-telemetry: deps-demo build
	$(BIN)/bench-e2e telemetry --fabricd $(BIN)/fabricd

bench-convergence: deps-demo build
	$(BIN)/bench-e2e convergence --fabricd $(BIN)/fabricd

# Hostile clients on loopback (about 4 minutes); BENCH_ABUSE_ARGS passes flags
# (--quick for a smoke run; bench-abuse --help).
bench-abuse: deps-demo build
	$(BIN)/bench-abuse --fabricd $(BIN)/fabricd $(BENCH_ABUSE_ARGS)

# Each target fuzzes for 60 s; minimizing a new input may take 2 s of it
# (Go's default, 60 s, would leave most of the minute to minimization).
FUZZ = -run '^$$' -fuzztime 60s -fuzzminimizetime 2s
fuzz:
	$(GO) test ./planes $(FUZZ) -fuzz FuzzParseTopology
	$(GO) test ./transport/internal/wire $(FUZZ) -fuzz 'FuzzParse$$'
	$(GO) test ./transport/internal/wire $(FUZZ) -fuzz FuzzParseUnchecked

clean:
	rm -rf $(BIN)
