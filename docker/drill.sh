#!/usr/bin/env bash
# Node-failure drill against docker/compose.yaml: a steady order load while
# one Redis container is killed and started again. It reports detection and
# recovery times and the orders' outcomes, then checks the stock invariants
# after healing and exits non-zero when one does not hold (as `make drill`
# does with local processes, no Docker). It stops what it started.
#
#   VICTIM=redis2 OUTAGE=8 docker/drill.sh
#   KEEP=1 docker/drill.sh       # leave the compose stack running afterwards
set -euo pipefail
cd "$(dirname "$0")"
S=${SHARDIS_URL:-http://127.0.0.1:7400}
H='Content-Type: application/json'
VICTIM=${VICTIM:-redis1}
OUTAGE=${OUTAGE:-5}
SKU="drill-$$"
LOADED=100000
TTL=5
out=$(mktemp -d)
LOAD=""

# Debian's docker.io comes with docker-compose (v1); Docker's own packages
# with the compose plugin.
if docker compose version >/dev/null 2>&1; then
	compose() { docker compose "$@"; }
elif command -v docker-compose >/dev/null; then
	compose() { docker-compose "$@"; }
else
	echo "drill: neither docker compose nor docker-compose found" >&2
	exit 2
fi

cleanup() {
	if [ -n "$LOAD" ]; then kill "$LOAD" 2>/dev/null || true; wait "$LOAD" 2>/dev/null || true; fi
	rm -rf "$out"
	if [ -z "${KEEP:-}" ]; then compose down >/dev/null 2>&1 || true; fi
}
# shellcheck disable=SC2317 # invoked by the trap
trap cleanup EXIT INT TERM

call() { curl -s -m 5 -o /dev/null -w '%{http_code}' -H "$H" -d "$2" "$S/shardis.v1.$1" || echo 000; }
state() { curl -s -m 2 -H "$H" -d '{}' "$S/shardis.v1.AdminService/ListNodes" | grep -o "\"name\":\"$1\"[^}]*\"state\":\"[A-Z_]*\"" | grep -o 'NODE_STATE_[A-Z]*' || true; }
node_of() { case $1 in redis1) echo n1;; redis2) echo n2;; redis3) echo n3;; *) echo "unknown VICTIM $1" >&2; exit 2;; esac; }
now_ms() { date +%s%3N; }
# wait_for SECONDS WHAT CMD...: run CMD until it succeeds, at most SECONDS.
wait_for() {
	local limit=$1 what=$2; shift 2
	local end=$(( $(date +%s) + limit ))
	until "$@"; do
		if [ "$(date +%s)" -ge "$end" ]; then echo "drill: $what: not within ${limit}s" >&2; exit 1; fi
		sleep 0.05
	done
}
is_state() { [ "$(state "$1")" = "$2" ]; }
# stock_field JSON FIELD: a top-level counter of a GetStock reply (absent = 0).
# The per-node list is cut out first: its entries have fields of the same
# names, and the reply puts some top-level ones (loaded) after it.
stock_field() {
	local v
	v=$(echo "$1" | sed -e 's/"nodes":\[[^]]*\],\{0,1\}//' -e 's/.*"stock":{//' -e 's/}.*//' |
		tr ',' '\n' | sed -n "s/^\"$2\":\"\([0-9]*\)\"$/\1/p")
	echo "${v:-0}"
}

N=$(node_of "$VICTIM")
compose up -d --build >/dev/null
wait_for 120 "service ready" curl -sf -m 2 "$S/readyz" -o /dev/null
[ "$(call InventoryService/LoadStock "{\"routeKey\":\"clothes\",\"skuId\":\"$SKU\",\"quantity\":\"$LOADED\"}")" = 200 ] ||
	{ echo "drill: LoadStock failed" >&2; exit 1; }

i=0
load() { while :; do i=$((i+1)); call InventoryService/Reserve "{\"orderId\":\"$SKU-$i\",\"items\":[{\"routeKey\":\"clothes\",\"skuId\":\"$SKU\",\"quantity\":\"1\"}],\"ttlSeconds\":$TTL}"; echo; done; }
load > "$out/codes" &
LOAD=$!
sleep 3
t0=$(now_ms)
compose kill -s KILL "$VICTIM" >/dev/null
wait_for 10 "$N marked DOWN" is_state "$N" NODE_STATE_DOWN; t1=$(now_ms)
sleep "$OUTAGE"
compose start "$VICTIM" >/dev/null; t2=$(now_ms)
wait_for 30 "$N marked UP" is_state "$N" NODE_STATE_UP; t3=$(now_ms)
sleep 3
kill "$LOAD"; wait "$LOAD" 2>/dev/null || true; LOAD=""
ok=$(grep -c '^200$' "$out/codes" || true)
failed=$(grep -vc '^200$' "$out/codes" || true)

# Healing: every reservation expires (none is confirmed) and the reconciler
# returns it; wait for reserved to reach 0, bounded.
stock() { curl -s -m 5 -H "$H" -d "{\"routeKey\":\"clothes\",\"skuId\":\"$SKU\"}" "$S/shardis.v1.InventoryService/GetStock"; }
healed() { [ "$(stock_field "$(stock)" reserved)" = 0 ]; }
wait_for $((TTL + 30)) "reserved units returned after the TTL" healed
st=$(stock)
avail=$(stock_field "$st" available); res=$(stock_field "$st" reserved)
conf=$(stock_field "$st" confirmed); loaded=$(stock_field "$st" loaded)

echo "time to mark $N DOWN:   $((t1-t0)) ms"
echo "time to mark $N UP:     $((t3-t2)) ms after start"
echo "reserves: $ok ok, $failed failed (codes: $(sort "$out/codes" | uniq -c | tr -s ' \n' ' '))"
echo "stock after healing: available $avail, reserved $res, confirmed $conf, loaded $loaded"
curl -s -m 5 "$S/metrics" | grep -E '^shardis_(parts_rolled_back_total|reconciler_parts_total)' || true

bad=0
if [ "$loaded" != "$LOADED" ]; then echo "VIOLATION: loaded $loaded, want $LOADED"; bad=1; fi
if [ $((avail + res + conf)) != "$loaded" ]; then echo "VIOLATION: available+reserved+confirmed = $((avail + res + conf)) != loaded $loaded"; bad=1; fi
if [ "$res" != 0 ] || [ "$conf" != 0 ]; then echo "VIOLATION: nothing was confirmed, yet reserved $res confirmed $conf after healing"; bad=1; fi
if [ "$ok" = 0 ]; then echo "VIOLATION: no reservation succeeded"; bad=1; fi
[ "$bad" = 0 ] && echo "drill: every invariant held"
exit "$bad"
