# Multiplane: `make demo` runs the control plane with the example fabric;
# `make test` runs every check CI runs. Both install what is missing first.
GO          ?= go
BIN         := bin
GOFLAGS_TEST ?= -count=1 -timeout 30m
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Version stamped into the binaries (--version) and the packages.
VERSION     ?= $(shell git describe --tags --match 'v[0-9]*' 2>/dev/null || echo v0.1.0)
COMMIT      ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
LDFLAGS     := -X github.com/multiplane/multiplane/internal/version.module=$(VERSION) -X github.com/multiplane/multiplane/internal/version.commit=$(COMMIT)

.PHONY: all build test check-large-files vet gofmt staticcheck tidy openapi-lint unit chaos chaos-smoke race fuzz fuzz-smoke lint demo run-fabricd bench-transport bench-transport-smoke bench-relay bench-telemetry bench-convergence bench-abuse soak-dashboard packages deps-demo deps-test clean

all: build

deps-demo:
	@scripts/deps.sh demo

deps-test:
	@scripts/deps.sh test

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

# packages: .deb packages of fabricd and the endpoint agent in dist/
# (nfpm as a library; docs/deploy.md).
packages: build
	$(GO) run ./cmd/mkpackages --version $(VERSION) --bin $(BIN) --out dist

# test: every check CI runs, cheapest first.
test: deps-test check-large-files vet gofmt staticcheck tidy openapi-lint unit chaos-smoke race fuzz-smoke

# Tracked files over 1 MiB fail unless listed in scripts/large-files.allow.
check-large-files:
	@scripts/check-large-files

vet:
	$(GO) vet ./...

gofmt:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

staticcheck:
	$(GO) run $(STATICCHECK) ./...

# api/openapi.yaml passes Redocly's recommended rules with no warning
# (redocly.yaml; @redocly/cli pinned in package.json).
openapi-lint: deps-test
	node_modules/.bin/redocly lint api/openapi.yaml --config redocly.yaml

# go.mod and go.sum are what `go mod tidy` would write.
tidy:
	$(GO) mod tidy -diff

# Every package's tests (with CI=true the ones needing root, netns or
# PostgreSQL fail instead of skipping).
unit: deps-test
	$(GO) test $(GOFLAGS_TEST) -skip '^TestChaos$$' ./...

# The chaos suite (package chaos): three fabricd replicas, a 3-member etcd,
# PostgreSQL, switches, agents and traffic while processes are killed at
# random and planes fail; its invariants are checked throughout. It runs
# alone: its traffic invariant judges seconds on a machine it must not share
# with other tests. make chaos runs CHAOS (10m) and writes
# docs/benchmarks/chaos.md; make test runs 90 s of it.
CHAOS ?= 10m
chaos: deps-test
	@CI=true $(GO) test -count=1 -timeout 40m -run '^TestChaos$$' ./chaos -chaos.duration $(CHAOS) \
	  -chaos.report $(CURDIR)/docs/benchmarks/chaos.md; status=$$?; \
	  sed -n '1,/^## Fault log/p' docs/benchmarks/chaos.md; exit $$status

chaos-smoke: deps-test
	$(GO) test $(GOFLAGS_TEST) -run '^TestChaos$$' ./chaos -chaos.duration 90s

# The race detector over the concurrent packages.
RACE_PKGS := ./bench/ ./transport/... ./agent/... ./planes/... ./policy/... ./telemetry/... ./evidence/... ./history/...
race: deps-test
	$(GO) test -race $(GOFLAGS_TEST) $(RACE_PKGS)

lint: vet gofmt staticcheck

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

# ENDPOINTS=16000 writes docs/benchmarks/convergence-16000.md beside the
# default 4,000's convergence.md.
ENDPOINTS ?= 4000
bench-convergence: deps-demo build
	$(BIN)/bench-e2e convergence --fabricd $(BIN)/fabricd --endpoints $(ENDPOINTS)

# The dashboard open for SOAK (10m) against fabricd with traffic: the page's
# heap and fabricd's RSS stay flat (integration/TestDashboardSoak).
SOAK ?= 10m
soak-dashboard: deps-test
	MULTIPLANE_SOAK=$(SOAK) CI=true $(GO) test -count=1 -timeout 30m -run TestDashboardSoak -v ./integration/

# Hostile clients on loopback (about 4 minutes); BENCH_ABUSE_ARGS passes flags
# (--quick for a smoke run; bench-abuse --help).
bench-abuse: deps-demo build
	$(BIN)/bench-abuse --fabricd $(BIN)/fabricd $(BENCH_ABUSE_ARGS)

# Every fuzz target (package:Func), each for FUZZTIME (make fuzz FUZZTIME=5m);
# minimizing a new input may take 2 s of it (Go's default, 60 s, would leave
# most of a minute to minimization). fuzz-smoke is the short run make test does.
FUZZ_TARGETS := ./planes:FuzzParseTopology ./transport/internal/wire:FuzzParse \
	./transport/internal/wire:FuzzParseUnchecked ./transport/internal/wire:FuzzAckLength \
	./telemetry:FuzzFrameDecode ./bench:FuzzVerify
FUZZTIME ?= 60s
FUZZ_SMOKETIME ?= 10s
# scripts/fuzz-target tells a finding from Go 1.26's fuzztime deadline race.
fuzz_each = for t in $(FUZZ_TARGETS); do \
	  echo "fuzz $$t for $(1)"; \
	  GO=$(GO) scripts/fuzz-target $${t%%:*} $${t\#\#*:} $(1) || exit 1; \
	done

fuzz:
	@$(call fuzz_each,$(FUZZTIME))

fuzz-smoke:
	@$(call fuzz_each,$(FUZZ_SMOKETIME))

clean:
	rm -rf $(BIN)
