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

# call METHOD BODY prints the HTTP status of one call, without a newline:
# 000 when it got no answer (curl's -w prints that itself).
call() { curl -s -m 5 -o /dev/null -w '%{http_code}' -H "$H" -d "$2" "$S/shardis.v1.$1" || true; }
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
# stock_field JSON FIELD: a top-level counter of a GetStock reply (absent
# = 0); it prints nothing and fails when JSON is not one (a failed or
# empty read: curl's, or a Connect error). It walks the JSON itself rather
# than matching text: protojson puts a space after some commas in some
# builds, the per-node list (inside the stock object) has fields of the
# same names, its error strings may hold brackets, and the reply puts some
# top-level fields (loaded) after it.
stock_field() {
	printf '%s' "$1" | awk -v want="$2" '
	{ s = s $0 "\n" }
	END {
		n = length(s); depth = 0; key = ""; found = 0
		for (i = 1; i <= n; i++) {
			c = substr(s, i, 1)
			if (c == "\"") { # a string, read whole; a key when a colon follows
				str = ""
				for (i++; i <= n && (c = substr(s, i, 1)) != "\""; i++) {
					if (c == "\\") { i++; c = substr(s, i, 1) }
					str = str c
				}
				for (j = i + 1; j <= n && substr(s, j, 1) ~ /[ \t\r\n]/; j++) {}
				if (substr(s, j, 1) == ":") { key = str; i = j; continue }
				value(str)
			} else if (c == "{" || c == "[") {
				depth++
				if (depth == 2 && c == "{" && key == "stock") found = 1
			} else if (c == "}" || c == "]") {
				depth--
			} else if (c ~ /[-0-9]/) { # a bare number
				for (str = c; i < n && substr(s, i + 1, 1) ~ /[-+.eE0-9]/; i++) str = str substr(s, i + 1, 1)
				value(str)
			}
		}
		if (!found) exit 1
		print (got == "" ? 0 : got)
	}
	function value(v) {
		if (depth == 2 && found && key == want && v ~ /^-?[0-9]+$/) got = v
	}'
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
stock() { curl -s -m 5 -H "$H" -d "{\"routeKey\":\"clothes\",\"skuId\":\"$SKU\"}" "$S/shardis.v1.InventoryService/GetStock" || true; }
# healed: a GetStock reply read, with nothing reserved (a failed read is
# not healed).
healed() { local r; r=$(stock_field "$(stock)" reserved) && [ "$r" = 0 ]; }
wait_for $((TTL + 30)) "reserved units returned after the TTL" healed
st=$(stock)
loaded=$(stock_field "$st" loaded) || { echo "drill: GetStock after healing: not a stock reply: $st" >&2; exit 1; }
avail=$(stock_field "$st" available); res=$(stock_field "$st" reserved)
conf=$(stock_field "$st" confirmed)

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
