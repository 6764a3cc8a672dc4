package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
)

// The bucketed-record floor: a yardstick beside the floor (floor.go),
// not shardis.
//
// The floor keeps each order's record as a key of its own with its
// retention (SET NX EX). The bucketed-record floor writes everything the
// floor next to the stock writes (VarHotFloorLocal: the counter, a redo
// entry, a deadline entry, the record, batched the same way) but the
// record is one field of a hash that holds every record of one minute
// (HSETNX: set only if the order id has none, so a retry cannot deduct
// twice), whose retention is one EXPIRE per hash per script call. The
// minute is the order id's own (the yardstick's ids carry it, as a minted
// id could), so a retry names the same hash. It asks what the record's
// structure alone costs: its orders/s over the seed's, measured in the
// same rounds as the floor's, say how far a design whose records are hash
// fields could go where shardis's records are keys (one packed string
// each, inventory/orderrec.go). What it leaves out is the reading side:
// a record found by id only in the hash of its id's minute, and retention
// by the minute, not by the order.

// floorBucketScript is floorScript's take ("t") with the record a field
// of its minute's hash: per entry it takes one unit and sets the field.
// KEYS: 1 pending index, 2 redo offsets hash, then per entry: its
// minute's record hash, its stock hash, its redo queue. ARGV: 1 pending
// TTL ms, 2 retention s, then per entry: mode (always "t"), member (the
// order id, the record's field), value.
// Replies one integer per entry: the redo offset, 0 when the stock is
// short, -1 when the hash has the member (nothing taken).
const floorBucketScript = `
local function I(n) return string.format('%d', n) end
local t = redis.call('TIME')
local dl = I(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1]))
local stock, offs, zs, zkeys, out, buckets = {}, {}, {}, {}, {}, {}
local function zadd(key, score, member)
  local q = zs[key]
  if not q then
    q = {}
    zs[key] = q
    zkeys[#zkeys + 1] = key
  end
  q[#q + 1] = score
  q[#q + 1] = member
end
for i = 0, (#KEYS - 2) / 3 - 1 do
  local bk, sk, rk = KEYS[3 + i * 3], KEYS[4 + i * 3], KEYS[5 + i * 3]
  local member, value = ARGV[4 + i * 3], ARGV[5 + i * 3]
  local s = stock[sk]
  if not s then
    local v = redis.call('HMGET', sk, 'available', 'reserved')
    s = {tonumber(v[1] or '0'), tonumber(v[2] or '0')}
    stock[sk] = s
  end
  local o = offs[rk]
  if not o then
    o = {tonumber(redis.call('HGET', KEYS[2], rk) or '0')}
    offs[rk] = o
  end
  if s[1] < 1 then
    out[#out + 1] = 0
  elseif redis.call('HSETNX', bk, member, value) == 1 then
    s[1], s[2], o[1] = s[1] - 1, s[2] + 1, o[1] + 1
    s.dirty, o.dirty, buckets[bk] = true, true, true
    zadd(rk, I(o[1]), member)
    zadd(KEYS[1], dl, member)
    out[#out + 1] = o[1]
  else
    out[#out + 1] = -1
  end
end
for sk, s in pairs(stock) do
  if s.dirty then redis.call('HSET', sk, 'available', I(s[1]), 'reserved', I(s[2])) end
end
for rk, o in pairs(offs) do
  if o.dirty then redis.call('HSET', KEYS[2], rk, I(o[1])) end
end
for _, k in ipairs(zkeys) do redis.call('ZADD', k, unpack(zs[k])) end
for bk in pairs(buckets) do redis.call('EXPIRE', bk, ARGV[2], 'NX') end
return out
`

// newFloorBucketBatcher is newFloorBatcher for the bucketed-record floor:
// its entries' keys are their minutes' record hashes (floorBucketOrder).
func newFloorBucketBatcher(ctx context.Context, n *node.Node) *floorBatcher {
	f := newFloorBatcher(ctx, n)
	f.script = redis.NewScript(floorBucketScript)
	f.headKeys = []string{floorPending, floorOffsets}
	f.headArgs = []any{"600000", "604800"}
	return f
}

// floorBucketKey is the record hash of the orders of one minute (Unix
// minutes).
func floorBucketKey(minute int64) string {
	return "floor:bucket:" + strconv.FormatInt(minute, 10)
}

// floorBucketID is a bucketed-record floor's order id: the minute it was made in,
// which names its record hash, then seq (unique per minute).
func floorBucketID(now time.Time, seq string) (id string, minute int64) {
	minute = now.Unix() / 60
	return strconv.FormatInt(minute, 10) + "." + seq, minute
}

// floorBucketOrder places a bucketed-record floor order of one unit of sku on f's
// node, its record there: one entry, one round trip. The record's value
// is the floor's record of such an order.
func floorBucketOrder(f *floorBatcher, id string, minute int64, sku string) error {
	r := floorReq{mode: "t", key: floorBucketKey(minute), sku: sku, member: id, value: "reserved|" + f.n.Name() + ":" + sku + ":1"}
	return floorRound([]floorReq{r}, []*floorBatcher{f})
}

// checkBucket verifies floorBucketScript on f's node, from an empty node:
// with 2 units, entries a, a again, b and c get offsets 1 and 2, a refusal
// of the repeated id, and a short reply; the minute's hash holds a and b,
// with the retention; the counter ends at 0 available and 2 reserved; the
// redo queue and the pending index hold a and b.
func (f *floorBatcher) checkBucket(ctx context.Context) error {
	if err := f.load(ctx, floorHotSKU, 2); err != nil {
		return err
	}
	c := f.n.Client()
	bk := floorBucketKey(1)
	keys := slices.Clone(f.headKeys)
	args := slices.Clone(f.headArgs)
	for _, m := range []string{"a", "a", "b", "c"} {
		keys = append(keys, bk, floorStock(floorHotSKU), floorRedo(floorHotSKU))
		args = append(args, "t", m, "v"+m)
	}
	out, err := f.script.Run(ctx, c, keys, args...).Int64Slice()
	if err != nil {
		return fmt.Errorf("bucketed-record floor check: %w", err)
	}
	if fmt.Sprint(out) != "[1 -1 2 0]" {
		return fmt.Errorf("bucketed-record floor check: replies %v, want [1 -1 2 0]", out)
	}
	if h, err := c.HGetAll(ctx, bk).Result(); err != nil || fmt.Sprint(h) != "map[a:va b:vb]" {
		return fmt.Errorf("bucketed-record floor check: %s holds %v (%v), want a and b", bk, h, err)
	}
	if ttl, err := c.TTL(ctx, bk).Result(); err != nil || ttl <= 0 {
		return fmt.Errorf("bucketed-record floor check: %s's TTL is %v (%v), want the retention", bk, ttl, err)
	}
	st, err := c.HMGet(ctx, floorStock(floorHotSKU), "available", "reserved").Result()
	if err != nil || fmt.Sprint(st) != "[0 2]" {
		return fmt.Errorf("bucketed-record floor check: stock %v (%v), want [0 2]", st, err)
	}
	if m, err := c.ZRange(ctx, floorRedo(floorHotSKU), 0, -1).Result(); err != nil || fmt.Sprint(m) != "[a b]" {
		return fmt.Errorf("bucketed-record floor check: redo queue holds %v (%v), want [a b]", m, err)
	}
	if m, err := c.ZRange(ctx, floorPending, 0, -1).Result(); err != nil || fmt.Sprint(m) != "[a b]" {
		return fmt.Errorf("bucketed-record floor check: pending index holds %v (%v), want [a b]", m, err)
	}
	return nil
}
