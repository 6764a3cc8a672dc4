package bench

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
)

// The guarded floor: the floor (floor.go) with the checks shardis's
// promises make every reservation pay on top of its writes, and nothing
// else of shardis. The floor writes the least state a reservation that
// keeps a record per order needs, and trusts everything it reads; the
// inventory targets are stated against it. The guarded floor asks how
// much of shardis's distance to the floor those checks alone cost: it
// writes exactly what the floor writes, in the same batches, and adds
//   - per script call, the node's identity and topology epoch read and
//     compared before anything is written (HMGET of its stamp), and its
//     write sequence advanced after (HINCRBY): a node restarted without
//     its data, or one of another topology, must not take an order, and
//     a node gone back in time must be told (never oversell, never lose
//     an acknowledged reservation);
//   - per counter and queue offset read, a check that it holds a
//     canonical integer (shardis's int, lua/prelude.lua): a corrupt
//     counter must refuse, not sell what it does not hold;
//   - per sorted set a call writes, a type check before the call's first
//     write to it (ZCARD once per key per call): Redis does not undo a
//     script's writes when a later command of it fails, so a key of the
//     wrong type found after an entry's fence was set would strand that
//     entry's stock;
//   - per entry, its own protected call (pcall): an entry that fails a
//     check answers its error and the batch's other entries go on, as
//     each order of a group call must (one order's corrupt counter must
//     not fail another's).
// Its replies are the floor's, and -2 for an entry that failed a check
// (nothing of it written). It is a yardstick, not shardis: counted beside
// the floor and shardis by TestWorkloadInstructions.

// floorGuardedScript is floorScript with the guards above. KEYS: 1 the
// stamp (floorStampKey), 2 pending index, 3 redo offsets hash, then per
// entry: its key and, for a take only, its stock hash and its redo queue
// (floorEntryKeys). ARGV: 1 the node's
// name, 2 its epoch, 3 pending TTL ms, 4 retention s, then per entry:
// mode, member, value.
const floorGuardedScript = `
local meta = redis.call('HMGET', KEYS[1], 'name', 'epoch', 'seq')
if meta[1] ~= ARGV[1] or meta[2] ~= ARGV[2] then
  return redis.error_reply('FLOOR_IDENTITY node ' .. tostring(meta[1]) .. ' at ' .. tostring(meta[2]))
end
local function I(n) return string.format('%d', n) end
local function int(v)
  if v == false or v == nil then return 0 end
  local n = tonumber(v)
  if n == nil or n % 1 ~= 0 or (v ~= '0' and not string.find(v, '^%-?[1-9]%d*$')) then
    error('FLOOR_CORRUPT ' .. tostring(v) .. ' is not an integer')
  end
  return n
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dl = I(now + tonumber(ARGV[3]))
local stock, offs, zs, zkeys, out, zok = {}, {}, {}, {}, {}, {}
local function zset_ok(key)
  if not zok[key] then
    redis.call('ZCARD', key)
    zok[key] = true
  end
end
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
local function entry(key, sk, rk, mode, member, value)
  if mode == 'r' then
    return redis.call('SET', key, value, 'NX', 'EX', ARGV[4]) and 1 or -1
  elseif mode == 'd' then
    return redis.call('SET', key, value, 'XX', 'KEEPTTL') and 1 or -1
  end
  local s = stock[sk]
  if not s then
    local v = redis.call('HMGET', sk, 'available', 'reserved')
    s = {int(v[1]), int(v[2])}
    stock[sk] = s
  end
  local o = offs[rk]
  if not o then
    o = {int(redis.call('HGET', KEYS[3], rk))}
    offs[rk] = o
  end
  zset_ok(rk)
  zset_ok(KEYS[2])
  if s[1] < 1 then return 0 end
  if not redis.call('SET', key, value, 'NX', 'EX', ARGV[4]) then return -1 end
  s[1], s[2], o[1] = s[1] - 1, s[2] + 1, o[1] + 1
  s.dirty, o.dirty = true, true
  zadd(rk, I(o[1]), member)
  zadd(KEYS[2], dl, member)
  return o[1]
end
local k = 4
for a = 5, #ARGV, 3 do
  local mode, sk, rk = ARGV[a]
  local key = KEYS[k]
  if mode == 'r' or mode == 'd' then k = k + 1 else sk, rk, k = KEYS[k + 1], KEYS[k + 2], k + 3 end
  local ok, r = pcall(entry, key, sk, rk, mode, ARGV[a + 1], ARGV[a + 2])
  out[#out + 1] = ok and r or -2
end
for sk, s in pairs(stock) do
  if s.dirty then redis.call('HSET', sk, 'available', I(s[1]), 'reserved', I(s[2])) end
end
for rk, o in pairs(offs) do
  if o.dirty then redis.call('HSET', KEYS[3], rk, I(o[1])) end
end
for _, k in ipairs(zkeys) do redis.call('ZADD', k, unpack(zs[k])) end
redis.call('HINCRBY', KEYS[1], 'seq', 1)
return out
`

// floorStampKey is the guarded floor's stamp: a hash of the node's name,
// epoch and write sequence (shardis's node.StampKey, its own key).
const floorStampKey = "floor:stamp"

// floorEpoch is the topology epoch the guarded floor's callers and stamps
// carry.
const floorEpoch = "1:floor"

// newGuardedFloorBatcher is newFloorBatcher for the guarded floor: its
// calls carry the stamp key and the node's name and epoch first.
func newGuardedFloorBatcher(ctx context.Context, n *node.Node) *floorBatcher {
	f := newFloorBatcher(ctx, n)
	f.script = redis.NewScript(floorGuardedScript)
	f.headKeys = []string{floorStampKey, floorPending, floorOffsets}
	f.headArgs = []any{n.Name(), floorEpoch, "600000", "604800"}
	return f
}

// stamp writes the guarded floor's stamp on f's node (a no-op for the
// plain floor, which reads none).
func (f *floorBatcher) stamp(ctx context.Context) error {
	if f.headKeys[0] != floorStampKey {
		return nil
	}
	if err := f.n.Client().HSet(ctx, floorStampKey, "name", f.n.Name(), "epoch", floorEpoch, "seq", "0").Err(); err != nil {
		return fmt.Errorf("floor stamp on %s: %w", f.n.Name(), err)
	}
	return nil
}
