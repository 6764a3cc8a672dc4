# shardis — see README.md. `make run` and `make test` work on a machine that
# has only Go: they install redis-server from Debian's packages when it is
# missing (as root, or through sudo).

GO        ?= go
BIN       := bin/shardis
TOOLS     := $(CURDIR)/bin/tools
SUDO      := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
BUF_VERSION            := v1.50.0
PROTOC_GEN_GO_VERSION  := v1.36.12
CONNECT_GEN_VERSION    := v1.21.1

.PHONY: all build test vet unit run drill bench generate deps-redis clean

all: build

## build: the shardis binary in bin/.
build:
	$(GO) build -o $(BIN) ./cmd/shardis

## deps-redis: install redis-server when it is missing.
deps-redis:
	@if ! command -v redis-server >/dev/null 2>&1; then \
		echo "redis-server not found: installing it from Debian's packages"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends redis-server >/dev/null; \
	fi
	@redis-server --version

vet:
	$(GO) vet ./...

## test: vet plus every test with the race detector, against real redis-server processes.
test: deps-redis vet
	$(GO) test -race -count=1 -timeout 12m ./...

## unit: the fast tests of pure logic only (no Redis).
unit:
	$(GO) test -count=1 -run '^Test' ./config/ ./router/ ./health/

## run: three local redis-server nodes + shardis serve on 127.0.0.1:7400, demo stock; Ctrl-C stops all.
run: deps-redis build
	@$(GO) build -o bin/devrun ./internal/cmd/devrun
	@bin/devrun --config config/example.yaml --bin $(BIN)

## drill: kill -9 a node under order load, restart it, report detection/recovery and check invariants.
drill: deps-redis
	$(GO) run ./internal/cmd/drill

## bench: Go benchmarks of the routing hot path.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime=1s ./router/

## generate: regenerate the protobuf and Connect code (tools installed with go install into bin/tools).
generate:
	GOBIN=$(TOOLS) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(CONNECT_GEN_VERSION)
	cd proto && PATH=$(TOOLS):$$PATH buf generate

clean:
	rm -rf bin
