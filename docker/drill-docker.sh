#!/usr/bin/env bash
# `make drill-docker`: the node-failure drill against Docker containers, on a
# machine with no image registry and no bridge networks. It
#   1. starts the Docker daemon when it is not running (as root:
#      dockerd --bridge=none --iptables=false, stopped again at the end),
#   2. builds two images locally: shardis as a static binary (CGO_ENABLED=0)
#      on scratch (docker/Dockerfile.scratch), and Redis from the host's
#      redis-server binary and the libraries ldd lists (docker import),
#   3. starts docker/compose.host.yaml (network_mode: host, 127.0.0.1:263xx;
#      it creates no network), the default services or with SENTINEL=1 the
#      "sentinel" profile,
#   4. runs internal/cmd/drill-docker: order load, docker kill -s KILL of a
#      node's Redis master container, detection (DOWN), recovery (docker
#      start; with SENTINEL=1 the promoted replica, then the old master back
#      as a replica), every invariant after healing,
#   5. tears everything down on any exit (trap): containers, the images
#      (KEEP_IMAGES=1 keeps them), the daemon it started.
#
#   docker/drill-docker.sh                 # three standalone nodes, kill n1
#   SENTINEL=1 docker/drill-docker.sh      # two Sentinel shards, kill shard a's master
#   VICTIM=n2 OUTAGE=6s KEEP_IMAGES=1 docker/drill-docker.sh
# It needs docker and docker compose (or docker-compose): `make drill-docker`
# installs Debian's docker.io and docker-compose when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
PROJECT=shardis-drill
COMPOSE_FILE=docker/compose.host.yaml
export SHARDIS_IMAGE=shardis-drill/shardis:local
export REDIS_IMAGE=shardis-drill/redis:local
OUTAGE=${OUTAGE:-4s}
if [ -n "${SENTINEL:-}" ]; then
	PORTS="26310 26311 26312 26321 26322 26331 26332 26333 26334 26335 26336"
	SERVICES="shardis-sentinel"
	CONFIG=docker/shardis-sentinel.host.yaml
	VICTIM=${VICTIM:-a}
	CONTAINERS="127.0.0.1:26311=$PROJECT-shard-a-1,127.0.0.1:26312=$PROJECT-shard-a-2,127.0.0.1:26321=$PROJECT-shard-b-1,127.0.0.1:26322=$PROJECT-shard-b-2"
	SHARDIS=$PROJECT-shardis-sentinel
else
	PORTS="26300 26301 26302 26303"
	SERVICES="redis1 redis2 redis3 shardis"
	CONFIG=docker/shardis.host.yaml
	VICTIM=${VICTIM:-n1}
	CONTAINERS="127.0.0.1:26301=$PROJECT-redis1,127.0.0.1:26302=$PROJECT-redis2,127.0.0.1:26303=$PROJECT-redis3"
	SHARDIS=$PROJECT-shardis
fi
WORK=$(mktemp -d /tmp/shardis-drill-docker.XXXXXX)
DOCKERD=""
COMPOSE=()

log() { echo "drill-docker: $*"; }

teardown() {
	local rc=$?
	trap - EXIT INT TERM
	if [ "$rc" != 0 ] && docker inspect "$SHARDIS" >/dev/null 2>&1; then
		log "failed (exit $rc); the last lines of $SHARDIS's log:"
		docker logs --tail 20 "$SHARDIS" 2>&1 | sed 's/^/  /' || true
	fi
	if [ "${#COMPOSE[@]}" -gt 0 ]; then
		"${COMPOSE[@]}" --profile sentinel down --remove-orphans --timeout 5 >/dev/null 2>&1 || true
	fi
	if docker info >/dev/null 2>&1; then
		local left
		left=$(docker ps -aq --filter "name=^$PROJECT-" 2>/dev/null || true)
		# shellcheck disable=SC2086 # one id per word
		[ -z "$left" ] || docker rm -f $left >/dev/null 2>&1 || true
		if [ -z "${KEEP_IMAGES:-}" ]; then
			docker rmi "$SHARDIS_IMAGE" "$REDIS_IMAGE" >/dev/null 2>&1 || true
		fi
		log "torn down: containers removed$([ -n "${KEEP_IMAGES:-}" ] && echo ", images kept" || echo ", images removed")"
	fi
	if [ -n "$DOCKERD" ]; then
		kill "$DOCKERD" 2>/dev/null || true
		wait "$DOCKERD" 2>/dev/null || true
		log "stopped the Docker daemon it started (pid $DOCKERD)"
	fi
	rm -rf "$WORK"
	exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT TERM

# wait_for SECONDS WHAT CMD...: run CMD until it succeeds, at most SECONDS.
wait_for() {
	local limit=$1 what=$2; shift 2
	local end=$(( $(date +%s) + limit ))
	until "$@" >/dev/null 2>&1; do
		if [ "$(date +%s)" -ge "$end" ]; then log "$what: not within ${limit}s" >&2; return 1; fi
		sleep 0.2
	done
}

command -v docker >/dev/null || { log "docker not found: run make drill-docker (it installs docker.io)" >&2; exit 1; }
if ! docker info >/dev/null 2>&1; then
	if [ "$(id -u)" != 0 ] || ! command -v dockerd >/dev/null; then
		log "the Docker daemon is not running; start it (as root: dockerd --bridge=none --iptables=false)" >&2
		exit 1
	fi
	log "starting the Docker daemon: dockerd --bridge=none --iptables=false (log: $WORK/dockerd.log)"
	dockerd --bridge=none --iptables=false >"$WORK/dockerd.log" 2>&1 &
	DOCKERD=$!
	wait_for 60 "the Docker daemon" docker info || { tail -20 "$WORK/dockerd.log" >&2; exit 1; }
fi
if docker compose version >/dev/null 2>&1; then
	COMPOSE=(docker compose)
elif command -v docker-compose >/dev/null; then
	COMPOSE=(docker-compose)
else
	log "neither docker compose nor docker-compose found: run make drill-docker (it installs docker-compose)" >&2
	exit 1
fi
COMPOSE+=(-p "$PROJECT" -f "$COMPOSE_FILE")
for p in $PORTS; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		log "port 127.0.0.1:$p is in use: the drill's containers listen on $PORTS" >&2
		exit 1
	fi
done

log "building $SHARDIS_IMAGE: CGO_ENABLED=0 static binary on scratch"
ctx=$WORK/shardis
mkdir -p "$ctx"
CGO_ENABLED=0 "$GO" build -trimpath -ldflags "-s -w -X main.version=drill" -o "$ctx/shardis" ./cmd/shardis
cp docker/Dockerfile.scratch docker/shardis.host.yaml docker/shardis-sentinel.host.yaml "$ctx/"
docker build -q -t "$SHARDIS_IMAGE" -f "$ctx/Dockerfile.scratch" "$ctx" >/dev/null 2>"$WORK/build.log" ||
	{ cat "$WORK/build.log" >&2; exit 1; }

log "building $REDIS_IMAGE: the host's $(redis-server --version | cut -d' ' -f1-3) and its libraries (docker import)"
root=$WORK/redis-root
server=$(readlink -f "$(command -v redis-server)")
mkdir -p "$root/usr/bin" "$root/data" "$root/tmp" "$root/conf"
cp "$server" "$root/usr/bin/"
# redis-server, redis-sentinel (and Debian's redis-check-rdb) are one
# binary that picks its mode from argv[0].
for name in redis-server redis-sentinel; do
	[ "$(basename "$server")" = "$name" ] || ln -sf "$(basename "$server")" "$root/usr/bin/$name"
done
cp "$(command -v redis-cli)" "$root/usr/bin/"
for lib in $( (ldd "$server"; ldd "$(command -v redis-cli)") | grep -o '/[^ ]*' | sort -u); do
	mkdir -p "$root$(dirname "$lib")"
	cp -L "$lib" "$root$lib"
done
touch "$root/conf/sentinel.conf"
tar -C "$root" -c . | docker import --change 'ENV PATH=/usr/bin' --change 'WORKDIR /data' - "$REDIS_IMAGE" >/dev/null

log "building the drill client (internal/cmd/drill-docker)"
"$GO" build -o "$WORK/drill-docker" ./internal/cmd/drill-docker

networks_before=$(docker network ls -q | sort)
log "starting $COMPOSE_FILE ($([ -n "${SENTINEL:-}" ] && echo "profile sentinel" || echo "default services"), network_mode host): ${COMPOSE[*]} up -d $SERVICES"
# shellcheck disable=SC2086 # one service per word
"${COMPOSE[@]}" ${SENTINEL:+--profile sentinel} up -d $SERVICES 2>&1 | sed 's/^/  /'
if [ "$(docker network ls -q | sort)" != "$networks_before" ]; then
	log "a Docker network was created: the drill must use the host network only" >&2
	exit 1
fi
log "no Docker network created (networks: $(docker network ls --format '{{.Name}}' | sort | tr '\n' ' '))"
docker ps --filter "name=^$PROJECT-" --format '  {{.Names}}\t{{.Image}}\t{{.Status}}'

"$WORK/drill-docker" --config "$CONFIG" --kill "$VICTIM" --outage "$OUTAGE" --containers "$CONTAINERS"
