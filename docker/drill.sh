#!/usr/bin/env bash
# Node-failure drill against docker/compose.yaml: a steady order load while
# one Redis container is stopped and started again; reports what happened.
# The same drill with local processes, no Docker: `make drill`.
set -euo pipefail
cd "$(dirname "$0")"
S=${SHARDIS_URL:-http://127.0.0.1:7400}
H='Content-Type: application/json'
VICTIM=${VICTIM:-redis1}
OUTAGE=${OUTAGE:-5}
call() { curl -s -o /dev/null -w '%{http_code}' -H "$H" -d "$2" "$S/shardis.v1.$1"; }
state() { curl -s -H "$H" -d '{}' "$S/shardis.v1.AdminService/ListNodes" | grep -o "\"name\":\"$1\"[^}]*\"state\":\"[A-Z_]*\"" | grep -o 'NODE_STATE_[A-Z]*'; }
node_of() { case $1 in redis1) echo n1;; redis2) echo n2;; redis3) echo n3;; esac; }
now_ms() { date +%s%3N; }

docker compose up -d --build >/dev/null
until curl -sf "$S/healthz" >/dev/null; do sleep 0.5; done
call InventoryService/LoadStock '{"routeKey":"clothes","skuId":"drill-sku","quantity":"100000"}' >/dev/null

ok=0; failed=0; i=0; run=$$
load() { while :; do i=$((i+1)); c=$(call InventoryService/Reserve "{\"orderId\":\"drill-$run-$i\",\"items\":[{\"routeKey\":\"clothes\",\"skuId\":\"drill-sku\",\"quantity\":\"1\"}],\"ttlSeconds\":5}"); echo "$c"; done; }
load > /tmp/shardis-drill.$run &
LOAD=$!
sleep 3
N=$(node_of "$VICTIM"); t0=$(now_ms)
docker compose kill -s KILL "$VICTIM" >/dev/null
until [ "$(state "$N")" = NODE_STATE_DOWN ]; do sleep 0.05; done; t1=$(now_ms)
sleep "$OUTAGE"
docker compose start "$VICTIM" >/dev/null; t2=$(now_ms)
until [ "$(state "$N")" = NODE_STATE_UP ]; do sleep 0.05; done; t3=$(now_ms)
sleep 3; kill $LOAD; wait $LOAD 2>/dev/null || true
ok=$(grep -c '^200$' /tmp/shardis-drill.$run || true); failed=$(grep -vc '^200$' /tmp/shardis-drill.$run || true)
sleep 8   # one TTL + reconcile passes
stock=$(curl -s -H "$H" -d '{"routeKey":"clothes","skuId":"drill-sku"}' "$S/shardis.v1.InventoryService/GetStock")
echo "time to mark $N DOWN:   $((t1-t0)) ms"
echo "time to mark $N UP:     $((t3-t2)) ms after start"
echo "reserves: $ok ok, $failed failed"
echo "stock: $stock"
curl -s "$S/metrics" | grep -E '^shardis_(parts_rolled_back_total|reconciler_parts_total)'
rm -f /tmp/shardis-drill.$run
