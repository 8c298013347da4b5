# Multiplane: `make demo` runs the control plane with the example fabric;
# `make test` runs every test. Both install what is missing first.
GO          ?= go
BIN         := bin
GOFLAGS_TEST ?= -count=1 -timeout 30m
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all build test demo lint deps-demo deps-test fuzz clean bench-transport

all: build

deps-demo:
	@scripts/deps.sh demo

deps-test:
	@scripts/deps.sh test

build:
	$(GO) build -o $(BIN)/ ./cmd/...

test: deps-test
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) test $(GOFLAGS_TEST) ./...

lint:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) run $(STATICCHECK) ./...

# demo: fabricd with the example topology, private PostgreSQL and embedded
# etcd under ./var. Ctrl-C stops everything; running it again keeps the data.
demo: deps-demo build
	@echo "fabricd: API http://127.0.0.1:8080/api/v1 - admin token in var/admin.token"
	@echo '  curl -H "Authorization: Bearer $$(cat var/admin.token)" localhost:8080/api/v1/planes'
	@exec $(BIN)/fabricd --data-dir var --topology examples/topology.yaml

fuzz:
	$(GO) test ./planes -run '^$$' -fuzz FuzzParseTopology -fuzztime 60s

clean:
	rm -rf $(BIN)
