# shardis — see README.md. `make test` and `make run` work on a machine that
# has only Go: they install redis-server from Debian's packages when it is
# missing (as root).

GO       ?= go
BIN      := bin/shardis
SUDO     := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all build test vet unit bench deps-redis clean

all: build

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

## unit: the fast tests only (no Redis).
unit:
	$(GO) test -count=1 ./config/ ./router/ ./health/

## bench: Go benchmarks of the routing hot path.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime=1s ./router/

clean:
	rm -rf bin
