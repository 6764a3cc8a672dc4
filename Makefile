# shardis — see README.md. `make run` and `make test` work on a machine that
# has only Go: they install redis-server and PostgreSQL from Debian's
# packages when they are missing (as root, or through sudo).

GO        ?= go
BIN       := bin/shardis
TOOLS     := $(CURDIR)/bin/tools
SUDO      := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
BUF_VERSION            := v1.50.0
PROTOC_GEN_GO_VERSION  := v1.36.12
CONNECT_GEN_VERSION    := v1.21.1

.PHONY: all build test vet staticcheck unit run drill drill-sentinel drill-docker deps-docker bench bench-quick generate deps-cc deps-redis deps-pg deps-sentinel deps-bench clean

all: build

## build: the shardis binary in bin/, its version stamped from git (shardis version).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/shardis

## deps-cc: install a C compiler (Debian's gcc and libc6-dev) when go finds none: the race
## detector that vet and test build with needs cgo, which Go turns off without one
## ("-race requires cgo"). Go from its own tarball on a fresh Debian has none.
deps-cc:
	@if [ "$$($(GO) env CGO_ENABLED)" != 1 ] && [ -z "$$CGO_ENABLED" ]; then \
		echo "no C compiler for cgo (the race detector needs one): installing gcc from Debian's packages"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null; \
	fi
	@[ "$$($(GO) env CGO_ENABLED)" = 1 ] || { echo "cgo is off (CGO_ENABLED=$$($(GO) env CGO_ENABLED)): vet and test build with -race, which needs it" >&2; exit 1; }

## deps-redis: install redis-server when it is missing.
deps-redis:
	@if ! command -v redis-server >/dev/null 2>&1; then \
		echo "redis-server not found: installing it from Debian's packages"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends redis-server >/dev/null; \
	fi
	@redis-server --version

## deps-pg: install PostgreSQL (Debian's postgresql package: initdb, postgres) when it is
## missing. The tests, `make run` and the benchmark start their own servers on loopback
## ports (internal/pgproc); the package's own cluster is not used.
PG_FOUND = $(firstword $(wildcard /usr/lib/postgresql/*/bin/postgres) $(shell command -v postgres 2>/dev/null))
deps-pg:
	@if [ -z "$(PG_FOUND)" ] && [ -z "$$SHARDIS_PG_BIN" ]; then \
		echo "PostgreSQL not found: installing it from Debian's packages"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends postgresql >/dev/null; \
	fi
	@p="$${SHARDIS_PG_BIN:+$$SHARDIS_PG_BIN/postgres}"; [ -n "$$p" ] || p=$$(ls -d /usr/lib/postgresql/*/bin/postgres 2>/dev/null | sort -V | tail -1); \
		[ -n "$$p" ] || p=$$(command -v postgres); "$$p" --version

## deps-sentinel: install redis-sentinel (Debian package redis-sentinel) when it is missing;
## the Sentinel tests, drills, chaos topology and benchmarks start real sentinels.
deps-sentinel: deps-redis
	@if ! command -v redis-sentinel >/dev/null 2>&1; then \
		echo "redis-sentinel not found: installing it from Debian's packages"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends redis-sentinel >/dev/null; \
	fi
	@redis-sentinel --version

## vet: go vet with -race, so it type-checks against the same race-instrumented builds of
## the packages that make test's go test -race compiles and caches: from an empty build
## cache (a fresh CI machine) vet then test built in 263 s here, against 384 s with a plain
## go vet compiling every package a second time. TESTMOD: see the test target's last paragraph.
## -trimpath (vet and test alike, so they share their builds): without it the build cache keys every
## shardis package's compile on the folder it was checked out in, so a second clone or worktree of the
## same code compiled all of them again and vet analysed them again: 74 s and 12 s of CPU in a
## clean-clone make test (perf, every process). With it, only what differs from a build already cached:
## the next clean clone of the same commit ran make test in 4m50s against 5m20s, quiet. The test
## binaries are linked again either way (go test does not cache them: 35-39 s). From an empty cache it
## changes nothing. File names in race reports and panics read as import paths (github.com/shardis/...).
TESTMOD := $(GO) run ./internal/cmd/testmod
vet: deps-cc
	m=$$($(TESTMOD)) && $(GO) vet -race -trimpath -modfile=$$m ./...

## staticcheck: honnef.co/go/tools' staticcheck (pinned: STATICCHECK) over every package, tests
## included, fetched from the Go module proxy by go run (not into go.mod). Not part of make test:
## from an empty cache it compiles the tool and analyses the tree for a minute or more of CPU; run it
## before a commit that changes much (it reported nothing on main on 2026-12-06).
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
staticcheck:
	$(GO) run $(STATICCHECK) ./...

## test: vet plus every test with the race detector, against real redis-server, redis-sentinel and PostgreSQL processes
## (every fuzz target's seed corpus runs as a plain test). Fuzzing itself is make fuzz-quick
## (the pure targets, about 30 s once its instrumented builds are cached; the first run builds
## them, 65-150 s on 2 cores, over 10 minutes from an empty build cache: too long for
## make test's 6-minute budget) and make fuzz (all eight, longer). The longest packages
## are named first, longest first: go test starts packages in the order given, so the short ones
## fill in beside them instead of the longest starting last (with only the first four named, node's
## 47 s and cache's 63 s started last and a quiet run of the tests took 294 s; with the first eight, 265 s;
## a clean-clone make test with a busy loop beside it for the whole run, 337 s, where one with the first
## four named and a busy loop for most of it had taken 383 s). Three at a time on two cores: the tests wait on
## servers and deadlines much of the time (a clean-clone run took 279 s with -p 3, 339 s with 2).
## -parallel 4: a package's parallel tests (most wait out a retention, a deadline or a restarted node's
## hold-back) run four at a time instead of GOMAXPROCS (two).
## -vet=off: the vet target above already ran every check go test's own vet pass would run again.
## -ldflags=-w: the test binaries are linked without DWARF (no debugger reads them here; panics and
## race reports read the runtime's own tables): linking internal/service's took 3.6-3.9 s of CPU instead of 5.2.
## vet and test build with -modfile set to what internal/cmd/testmod prints: go.mod plus a replace of go-redis
## v9.23.0 by a copy with one compile-time change (internal/cmd/testmod says what and why). Its baseClient holds
## weak.Pointer[Client], and every package whose types reach redis.Client compiled that instantiation again, with
## wrappers for the ~740 methods Client's struct promotes (1,478 functions): about 3.8 s of CPU per compile, race
## or not, in most of the ~90 compiles of shardis packages per make test. With the copy (and node's clientRef, which keeps atomic.Pointer[redis.Client] out of
## node's types for the same reason) vet's 31 compiles of shardis packages took 64 s of CPU instead of 146 s.
## v9.22.0 has no such field but leaks a Sentinel goroutine after Close that TestSentinelRouterFailoverUnderLoad
## catches; Go 1.27.3 compiles it the same way. unit, fuzz, fuzz-quick, chaos and explore build the same way;
## build, run, the drills and the benchmarks, and builds outside make, use go-redis as released.
## GORACE=atexit_sleep_ms=0: a -race binary otherwise sleeps 1 s before it exits (for races still being
## reported; a race found in a test fails that test when it is found, not at exit): 1 s of wall time per test
## binary, 33 of them. Any other GORACE option a caller sets is kept.
SLOW_PKGS := ./tests/ ./internal/explore/ ./inventory/ ./pgsync/ ./cache/ ./node/ ./cmd/shardis/ \
	./internal/service/ ./rollback/ ./internal/bench/
test: deps-redis deps-pg deps-sentinel vet
	m=$$($(TESTMOD)) && GORACE="$$GORACE atexit_sleep_ms=0" $(GO) test -modfile=$$m -race -trimpath -vet=off -ldflags=-w -count=1 -p 3 -parallel 4 -timeout 12m $(SLOW_PKGS) ./...

## unit: the fast tests of config, router and health (two of router's start redis-server).
unit: deps-redis
	m=$$($(TESTMOD)) && $(GO) test -modfile=$$m -count=1 -run '^Test' ./config/ ./router/ ./health/

## fuzz: every fuzz target for FUZZTIME each (default 30s), one after another; the
## inventory and service ones against real redis-server processes. A finding is
## written to the package's testdata/fuzz, which plain go test re-runs. Each target
## first builds an instrumented binary and replays its corpus (a few seconds under
## Redis), so FUZZTIME below ~10s can end in "context deadline exceeded" before
## fuzzing starts. FUZZPARALLEL caps the fuzz workers (each starts its own nodes).
## fuzz-quick: the three pure targets (no Redis) for 3s each.
.PHONY: fuzz fuzz-quick
FUZZTIME     ?= 30s
FUZZPARALLEL ?= 4
PURE_FUZZ    := config:FuzzParse router:FuzzHashKey router:FuzzRing
FUZZ_TARGETS := $(PURE_FUZZ) \
	internal/service:FuzzReserveRequest internal/service:FuzzLoadStock \
	inventory:FuzzScriptArgs inventory:FuzzCorruptValue inventory:FuzzRedoRead
fuzz: deps-redis
	@$(MAKE) --no-print-directory fuzz-run TARGETS="$(FUZZ_TARGETS)" FT=$(FUZZTIME)
fuzz-quick:
	@$(MAKE) --no-print-directory fuzz-run TARGETS="$(PURE_FUZZ)" FT=3s
.PHONY: fuzz-run
fuzz-run:
	@m=$$($(TESTMOD)) || exit 1; start=$$(date +%s); failed=""; for t in $(TARGETS); do \
		pkg=./$${t%%:*}/; name=$${t##*:}; \
		echo "$(GO) test -modfile=$$m -run '^\$$' -fuzz '^$$name\$$' -fuzztime $(FT) $$pkg"; \
		$(GO) test -modfile=$$m -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FT) -fuzzminimizetime 10s \
			-parallel $(FUZZPARALLEL) $$pkg || failed="$$failed $$name"; \
	done; \
	echo "fuzz: $(words $(TARGETS)) targets in $$(( $$(date +%s) - start ))s"; \
	if [ -n "$$failed" ]; then echo "fuzz: failed:$$failed"; exit 1; fi

## run: three local redis-server nodes, a local PostgreSQL (.run/pg, 127.0.0.1:7432), shardis serve on
## 127.0.0.1:7400 and shardis sync landing deductions in PostgreSQL, demo stock; Ctrl-C stops all.
run: deps-redis deps-pg build
	@$(GO) build -o bin/devrun ./internal/cmd/devrun
	@bin/devrun --config config/example.yaml --bin $(BIN)

## drill: kill -9 a node under order load, restart it, report detection/recovery and check invariants.
drill: deps-redis
	$(GO) run ./internal/cmd/drill

## drill-sentinel: per shard a master, a replica and three sentinels; kill -9 a master under order
## load, report time to DOWN and to UP on the promoted replica, orders by code, check invariants.
## DURABILITY=none|replica (default replica).
drill-sentinel: deps-sentinel
	$(GO) run ./internal/cmd/drill-sentinel --durability $(or $(DURABILITY),replica)

## deps-docker: install Debian's docker.io (dockerd and the CLI) when no Docker daemon is reachable and
## dockerd is missing, and docker-compose when neither `docker compose` nor docker-compose works.
deps-docker:
	@if ! command -v docker >/dev/null 2>&1 || { ! docker info >/dev/null 2>&1 && ! command -v dockerd >/dev/null 2>&1; }; then \
		echo "docker/dockerd not found: installing docker.io from Debian's packages"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends docker.io >/dev/null; \
	fi
	@if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then \
		echo "docker compose not found: installing docker-compose from Debian's packages"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends docker-compose >/dev/null; \
	fi
	@docker --version

## drill-docker: the drill of `make drill` against Docker containers with no image registry and no
## bridge network (docker/drill-docker.sh): starts dockerd (--bridge=none --iptables=false) when it is
## not running and we are root, builds shardis (static, on scratch) and a Redis image from the host's
## redis-server, runs docker/compose.host.yaml (network_mode host, 127.0.0.1:263xx), docker kills a node
## under order load, reports detection and recovery, checks every invariant, tears it all down.
## SENTINEL=1: two Sentinel shards (the image runs redis-server as redis-sentinel too), the master's
## container killed, failover. VICTIM=n2|b, OUTAGE=6s,
## KEEP_IMAGES=1 (keep the two images).
drill-docker: deps-redis deps-docker
	SENTINEL=$(SENTINEL) GO=$(GO) docker/drill-docker.sh

## chaos: seeded randomized run: clients + kill -9/SIGSTOP/drain/service restart, then every invariant
## checked; exits 1 on a violation. SEED=n replays a run (default: time-based), DURATION=60s (longer: e.g. 10m), CLIENTS=8.
## SENTINEL=1: every node a Sentinel group (master, replica, 3 sentinels), durability replica, and the
## nemesis kills (kill -9 master) and pauses masters; DURABILITY=none|replica overrides.
## V=1 lists examples of the excused violations (data lost by design after an accepted rollback).
## SYNC=1: PostgreSQL and `shardis sync` run beside it, and the database is checked against the nodes.
.PHONY: chaos
chaos: deps-redis $(if $(SENTINEL),deps-sentinel) $(if $(SYNC),deps-pg)
	m=$$($(TESTMOD)) && $(GO) run -modfile=$$m ./internal/cmd/chaos $(if $(SEED),--seed $(SEED)) --duration $(or $(DURATION),60s) --clients $(or $(CLIENTS),8) \
		$(if $(SENTINEL),--sentinel) $(if $(DURABILITY),--durability $(DURABILITY)) $(if $(SYNC),--sync) $(if $(V),-v)

## explore: the schedule explorer (internal/explore): N seeded schedules (default 1000) of a Reserve,
## its concurrent retry on a second instance, Confirm, Cancel, the reconciler on two instances,
## topology apply adding and removing a node, a node restart from its AOF and a node going back to an
## older copy of its data (then accepted), against real
## redis-server nodes, with every script call reordered, delayed, its reply dropped or its actor
## crashed as the seed draws; every invariant checked after each. SEED=n is the first seed (a
## failing seed prints its replay line: make explore SEED=n N=1), BUDGET=10m stops starting
## schedules, WORLDS=4 sets of four nodes run side by side, MUTATIONS=stage-takeover,... re-introduces
## known bugs (the explorer's self-check), TOPOLOGY=0.2, RESTART=0.15, LIMIT=0.4, INLINE=0.5 and LOSS=0.15
## are the chances of the topology, node-restart, limit-order, inline-part-order and data-loss actors per schedule
## (negative: never), MOVED=0.5 that of the topology actor's moved order (decided at T1, moved back), TWIN=0.5 that of a
## second operator rerunning topology apply while the nodes are not all stable (default never), LOSS2=0.5 that of a
## second data-loss actor beside the first (another node, or the same one again; default never), RELIMIT=0.5 that of an
## operator lowering the limit order's per-user limit mid-schedule (default never), SHRINK=0.5 that the topology actor's
## second apply moves route c off n3 (which stays for another route) and n4 at once (default never), REJOIN=0.5 that, once
## that second apply returned, the topology actor applies the 4-node topology again (a node rejoins route c it left; an
## apply refused for stale counters a node brought back is a legitimate outcome) and sells one more order of route c
## there (default never), ABANDON=0.05 the chance per
## call that its caller stops waiting for it and goes on while it is still on its way (default never), CLOCK=0.3 that of
## the clock actor, stepping one node's wall clock by up to CLOCKSTEP (default 300ms) while the others run (needs gcc; default
## never), OOM=0.3 that of the memory actor, one node out of memory while a few calls reach it (default never), OPERATOR=0.5
## that of the operator actor, settling or retrying the parts set aside as README's stuck-parts section says while the
## other actors run (default never), ASIDE=0.5 with it that of the set-aside actor, hiding a stock hash so parts are set
## aside with their records, expiring the records of orders whose parts wait aside, then repairing it (default never),
## PROFILE=stall parks many calls
## past the deadlines (PROFILE=calm: reorderings and delays only, no lost reply or crash;
## PROFILE=crash: calm, and half the actors die at a crash point; PROFILE=lossy: many lost replies
## and parked calls, no crash)
## V=1 prints every failing trace.
.PHONY: explore
explore: deps-redis
	m=$$($(TESTMOD)) && $(GO) run -modfile=$$m ./internal/cmd/explore $(if $(SEED),-seed $(SEED)) -n $(or $(N),1000) $(if $(BUDGET),-budget $(BUDGET)) \
		-worlds $(or $(WORLDS),4) $(if $(MUTATIONS),-mutations $(MUTATIONS)) $(if $(TOPOLOGY),-topology $(TOPOLOGY)) \
		$(if $(RESTART),-restart $(RESTART)) $(if $(LIMIT),-limit $(LIMIT)) $(if $(INLINE),-inline $(INLINE)) $(if $(LOSS),-loss $(LOSS)) \
		$(if $(MOVED),-moved $(MOVED)) $(if $(TWIN),-twin $(TWIN)) $(if $(LOSS2),-loss2 $(LOSS2)) $(if $(RELIMIT),-relimit $(RELIMIT)) $(if $(SHRINK),-shrink $(SHRINK)) $(if $(REJOIN),-rejoin $(REJOIN)) $(if $(ABANDON),-abandon $(ABANDON)) $(if $(CLOCK),-clock $(CLOCK)) $(if $(CLOCKSTEP),-clockstep $(CLOCKSTEP)) $(if $(OOM),-oom $(OOM)) $(if $(OPERATOR),-operator $(OPERATOR)) $(if $(ASIDE),-aside $(ASIDE)) $(if $(PROFILE),-profile $(PROFILE)) $(if $(V),-v)

## deps-bench: install nutcracker (twemproxy, the proxy baseline of the benchmarks) when it is missing.
deps-bench:
	@if ! command -v nutcracker >/dev/null 2>&1 && [ ! -x /usr/sbin/nutcracker ]; then \
		echo "nutcracker not found: installing it from Debian's packages"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends nutcracker >/dev/null; \
	fi
	@PATH="$$PATH:/usr/sbin" nutcracker --version 2>&1 | head -1

## bench: Go benchmarks of the routing hot path and of one reserve, then the full
## suite (a few minutes: router vs go-redis/Ring/twemproxy, inventory vs the seed,
## RPC, failover), which rewrites BENCHMARKS.md. Its last line is a JSON summary.
bench: deps-redis deps-pg deps-sentinel deps-bench
	$(GO) test -run '^$$' -bench . -benchmem -benchtime=1s ./router/
	$(GO) test -run '^$$' -bench Reserve -benchmem -benchtime=1s ./inventory/
	PATH="$$PATH:/usr/sbin" $(GO) run ./internal/cmd/bench --out BENCHMARKS.md

## bench-quick: the same suite shortened (about two minutes); prints a JSON summary as its last line.
bench-quick: deps-redis deps-pg deps-sentinel deps-bench
	@PATH="$$PATH:/usr/sbin" $(GO) run ./internal/cmd/bench --quick

## generate: regenerate the protobuf and Connect code (tools installed with go install into bin/tools).
generate:
	GOBIN=$(TOOLS) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(CONNECT_GEN_VERSION)
	cd proto && PATH=$(TOOLS):$$PATH buf generate

## clean: remove built binaries and the data of `make run` (.run/).
clean:
	rm -rf bin .run
