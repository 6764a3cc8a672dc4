package inventory

// The scripts of the reserve/settle/order life cycle and of stock loading.
// They run behind the shared prelude of lua.go: KEYS[1] is the stamp hash
// and ARGV[1..3] the header, so every script's own arguments start at
// ARGV[4]. Each reply is the body's; lua.go wraps it.

// reserveScript takes stock for the parts of one attempt on one node.
//
// KEYS: 1 stamp, 2 pending index, 3 redo offsets, then per part: part key,
// counter key (stock hash for kind s, quota counter for kind q), and redo
// queue key (kind s) or stock hash holding the limit (kind q).
// ARGV: 4 order id, 5 attempt token, 6 part deadline (partDue.arg: ms, or
// "+" and ms after this node's clock), then per part:
// part id, kind, sku, want, item index, and for kind s the redo queue, for
// kind q the units the user's previous quota node still counts while the
// topology migrates (-1 unknown; migrate.go).
//
// Per part it returns {state, qty, offset, limit}: state "pending" (taken
// now; a quota part is taken, and counted, even when the SKU has no
// limit, so a limit set later counts what the user already holds), "none"
// (nothing available, nothing written), "limit" (quota exceeded; qty =
// units held), "elsewhere" (limited, and the units the user's previous
// quota node counts are unknown), or the state of a part that already exists (the fence: a retry
// returns what was taken; a cancel that came first left "cancelled").
var reserveScript = newGroupedScript("reserve", true, partDueLua+`
local deadline = part_due(ARGV[6])
local np = (#KEYS - 3) / 3
zset_ok(KEYS[2]) -- fails now, before any write, if the index is not a sorted set
local plan = {}
local avail, resv = {}, {}
for i = 0, np - 1 do
  local pk, ck, xk = KEYS[4 + i * 3], KEYS[5 + i * 3], KEYS[6 + i * 3]
  local a = 7 + i * 6
  local p = {pk = pk, ck = ck, xk = xk, id = ARGV[a], kind = ARGV[a + 1], sku = ARGV[a + 2],
             want = tonumber(ARGV[a + 3]), item = ARGV[a + 4], queue = ARGV[a + 5]}
  local cur = part_get(pk)
  if cur and cur.state then
    p.out = {cur.state, tonumber(cur.qty) or 0, tonumber(cur.offset) or 0, 0}
  elseif p.kind == 's' then
    zset_ok(xk) -- the redo queue must be a sorted set
    local s = stock_get(ck)
    local err
    if avail[ck] == nil then
      avail[ck], err = int(s[1], ck .. ' available')
      if err then return err end
      resv[ck], err = int(s[3], ck .. ' reserved')
      if err then return err end
    end
    local _, oerr = offsets_ok(KEYS[3], p.xk)
    if oerr then return oerr end
    local limit
    limit, err = int(s[2], ck .. ' limit')
    if err then return err end
    local take = math.min(avail[ck], p.want)
    if take > 0 then
      avail[ck], resv[ck] = avail[ck] - take, resv[ck] + take
      p.avail, p.resv = avail[ck], resv[ck] -- the hash's values once this part is taken
      p.take = take
      p.out = {'pending', take, 0, limit}
    else
      p.out = {'none', 0, 0, limit}
    end
  else
    local limit, err = int(redis.call('HGET', xk, 'limit'), xk .. ' limit')
    if err then return err end
    local held
    held, err = int(redis.call('GET', ck), ck)
    if err then return err end
    local other = tonumber(p.queue) or 0
    if limit <= 0 then
      -- counted even without a limit, so a limit set later sees it
      p.take = p.want
      p.out = {'pending', p.want, 0, 0}
    elseif other < 0 then
      p.out = {'elsewhere', 0, 0, limit}
    elseif held + other + p.want > limit then
      p.out = {'limit', held + other, 0, limit}
    else
      p.take = p.want
      p.out = {'pending', p.want, 0, limit}
    end
  end
  plan[#plan + 1] = p
end
local out, deadlineS = {}, I(deadline)
for _, p in ipairs(plan) do
  if p.take then
    local off = 0
    if p.kind == 's' then
      -- absolute values from the plan into the script call's copy of the
      -- hash (stock_set: flush writes it once; the script is atomic)
      stock_set(p.ck, p.avail, p.resv)
      off = next_offset(KEYS[3], p.xk)
      zadd_later(p.xk, I(off), p.id)
      p.out[3] = off
    else
      redis.call('INCRBY', p.ck, I(p.take))
    end
    part_put(p.pk, {state = 'pending', kind = p.kind, order = ARGV[4], token = ARGV[5], sku = p.sku,
      qty = I(p.take), item = p.item, counter = p.ck, redo = p.kind == 's' and p.xk or '', offset = I(off),
      deadline = deadlineS, at = nowS})
    zadd_later(KEYS[2], deadlineS, p.id)
  end
  out[#out + 1] = p.out
end
return out
`)

// settleScript moves parts of one node from pending to confirmed or
// cancelled, each at most once (compare-and-set on the part state).
//
// KEYS: 1 stamp, 2 pending index, then one part key per part.
// ARGV: 4 action ("confirm", "cancel", or "abort": a cancel by a staged
// attempt before its order is decided, staged.go), 5 retention seconds
// of settled parts, 6 order id, then one part id per part.
//
// Per part it returns "done" (moved now), "already" (was in the target
// state), "tombstoned" (cancel or abort of a part that does not exist: a
// reserve arriving later takes nothing), "missing" (confirm of a part
// that does not exist), "held" (abort of a part a probe saw pending:
// nothing changed, it follows its order's decision) or "conflict:<state>".
// A pending stock part whose SKU's stock hash holds fewer reserved units
// than the part is refused before any write: SHARDIS_NOSTOCK when the hash
// does not exist at all (deleted), SHARDIS_CORRUPT otherwise.
var settleScript = newGroupedReleaseScript("settle", `
local action = ARGV[4]
local target = action == 'confirm' and 'confirmed' or 'cancelled'
local retention = tonumber(ARGV[5])
local out = {}
local todo = {}
redis.call('ZCARD', KEYS[2]) -- fails now, before any write, if the index is not a sorted set
for i = 3, #KEYS do
  local pk = KEYS[i]
  local rec = part_get(pk) or {}
  local f = {rec.state, rec.kind, rec.qty, rec.counter, rec.held}
  local st = f[1]
  if not st then
    out[#out + 1] = action == 'confirm' and 'missing' or 'tombstoned'
    if action ~= 'confirm' then todo[#todo + 1] = {pk = pk, tomb = true} end
  elseif st == 'pending' and action == 'abort' and f[5] then
    out[#out + 1] = 'held'
  elseif st == 'pending' then
    local q, err = int(f[3], pk .. ' qty')
    if err then return err end
    if f[2] == 's' then
      local r
      r, err = int(redis.call('HGET', f[4], 'reserved'), f[4] .. ' reserved')
      if err then return err end
      if r < q then
        if redis.call('EXISTS', f[4]) == 0 then
          return redis.error_reply('SHARDIS_NOSTOCK stock hash ' .. f[4] .. ' is missing (deleted?) while part ' .. pk ..
            ' holds ' .. q .. ' of it')
        end
        return redis.error_reply('SHARDIS_CORRUPT ' .. f[4] .. ' reserved is ' .. r .. ', part ' .. pk .. ' holds ' .. q)
      end
      local to = action == 'confirm' and 'confirmed' or 'available'
      local _, terr = int(redis.call('HGET', f[4], to), f[4] .. ' ' .. to)
      if terr then return terr end
    elseif action ~= 'confirm' then
      local _, cerr = int(redis.call('GET', f[4]), f[4])
      if cerr then return cerr end
    end
    todo[#todo + 1] = {pk = pk, id = ARGV[i + 4], kind = f[2], q = q, ck = f[4], rec = rec}
    out[#out + 1] = 'done'
  elseif st == target then
    out[#out + 1] = 'already'
  else
    out[#out + 1] = 'conflict:' .. st
  end
end
for _, p in ipairs(todo) do
  if p.tomb then
    part_put(p.pk, {state = 'cancelled', qty = '0', order = ARGV[6], tombstone = '1', at = nowS}, retention)
  else
    if p.kind == 's' then
      redis.call('HINCRBY', p.ck, 'reserved', I(-p.q))
      redis.call('HINCRBY', p.ck, action == 'confirm' and 'confirmed' or 'available', I(p.q))
    elseif action ~= 'confirm' then
      if redis.call('DECRBY', p.ck, I(p.q)) <= 0 then redis.call('DEL', p.ck) end
    end
    p.rec.state = target
    p.rec.settled_at = nowS
    part_put(p.pk, p.rec, retention)
    redis.call('ZREM', KEYS[2], p.id)
  end
end
return out
`)

// orderScript is the order record's state machine on the order's home node.
//
// KEYS: 1 stamp, 2 order key. ARGV: 4 op, 5 token, then op-specific
// arguments. Returns {status, token, deadline, parts, reason,
// wait_ms}; what the caller does with it depends on op:
//
//	begin   ARGV 6 lease ms, 7 digest, 8 user, 9 ttl ms, 10 retention s.
//	        A free order (missing or failed) becomes "reserving" under the
//	        caller's token: status "begin". A reserving order whose lease
//	        ran out is taken over the same way. Otherwise the record as is
//	        ("reserving" with wait_ms, "reserved", "confirmed",
//	        "cancelled"), or "mismatch" when the digest differs.
//	commit  ARGV 6 parts JSON, 7 retention s. reserving+token or
//	        staging+token → reserved. Otherwise "lost" with the current
//	        status as reason.
//	fail    reserving+token or staging+token → failed (the attempt gave up,
//	        or a recovery found a promised part missing).
//	withdraw staging+token → no record ("missing"): only for an attempt
//	        that left nothing on any node (soldout.go); otherwise the
//	        record as is.
//	confirm reserved → confirmed, or → cancelled/"expired" past the deadline.
//	cancel  reserved/reserving/failed → cancelled; missing → tombstone.
//	expire  (reconciler, ARGV 5 the due part's token) reserved past
//	        deadline → cancelled/"expired"; reserving past lease → failed;
//	        missing (never written, not moved away) → failed under the
//	        part's token (a stale stage of that token, stageTakeScript, is
//	        refused afterwards). Returns the record
//	        either way.
//
// A "staging" record is never taken over, confirmed, cancelled or expired
// here: every op but commit, fail and withdraw returns it as it is ("staging", with
// its promised parts and wait_ms), and the caller decides it first
// (staged.go: resolveStaged), then repeats the op.
//
// A record marked moved (topology.go) is treated as absent and dropped.
//
// It runs as two scripts of one body (oom.go): orderScript, refused whole
// on a node out of memory, for begin (it starts an order), and
// orderDecideScript, which runs there too, for every other op (they decide
// an order that exists, or tombstone one that does not); orderDecideScript
// refuses begin.
var orderScript = newGroupedScript("order", true, orderBody)

// orderDecideScript is orderScript's body for every op but begin, declared
// memRelease (oom.go).
var orderDecideScript = newGroupedReleaseScript("order", `
if ARGV[4] == 'begin' then
  return redis.error_reply('SHARDIS_BADOP begin takes memory: not an op of the order-decide script')
end
`+orderBody)

// orderBody is the order record's state machine (orderScript).
const orderBody = `
local key, op, token = KEYS[2], ARGV[4], ARGV[5]
local f = redis.call('HMGET', key, 'status', 'token', 'deadline', 'parts', 'reason', 'lease', 'digest', 'moved')
local moved = f[8]
if moved then
  -- moved to another node by a topology change (migrate.go): dead here
  redis.call('DEL', key)
  f = {}
end
local status, cur, deadline, parts, reason = f[1], f[2] or '', tonumber(f[3]) or 0, f[4] or '', f[5] or ''
local lease = tonumber(f[6]) or 0
local function record(st, why)
  return {st, cur, deadline, parts, why or reason, math.max(lease - now, 0)}
end
local function final(st, why, retention)
  redis.call('HSET', key, 'status', st, 'reason', why, 'decided_at', now)
  redis.call('EXPIRE', key, retention)
  status, reason = st, why
end
if status == 'staging' and op ~= 'commit' and op ~= 'fail' and op ~= 'withdraw' then
  if op == 'begin' and f[7] ~= ARGV[7] then return record('mismatch') end
  return record('staging')
end
if op == 'begin' then
  if status == 'reserving' then
    if f[7] ~= ARGV[7] then return record('mismatch') end
    if lease > now then return record('reserving') end
    -- the attempt's lease ran out: take over under a new token
  elseif status and status ~= 'failed' then
    if status ~= 'cancelled' and f[7] and f[7] ~= ARGV[7] then return record('mismatch') end
    return record(status)
  elseif status == 'failed' and cur == token then
    -- a stale copy of an attempt already decided failed (see expire)
    return record('failed')
  end
  deadline = now + tonumber(ARGV[9])
  lease = now + tonumber(ARGV[6])
  redis.call('DEL', key)
  redis.call('HSET', key, 'status', 'reserving', 'token', token, 'lease', lease,
    'digest', ARGV[7], 'user', ARGV[8], 'deadline', deadline, 'created', now)
  redis.call('EXPIRE', key, tonumber(ARGV[10]))
  cur, parts, reason = token, '', ''
  return record('begin')
elseif op == 'commit' then
  if (status ~= 'reserving' and status ~= 'staging') or cur ~= token then return record('lost', tostring(status)) end
  redis.call('HSET', key, 'status', 'reserved', 'parts', ARGV[6], 'reserved_at', nowS)
  redis.call('EXPIRE', key, I(tonumber(ARGV[7])))
  parts = '' -- the caller has them: do not send them back
  return record('reserved')
elseif op == 'fail' then
  if (status == 'reserving' or status == 'staging') and cur == token then
    redis.call('HSET', key, 'status', 'failed', 'decided_at', now)
    return record('failed')
  end
  return record(status or 'missing')
elseif op == 'withdraw' then
  if status == 'staging' and cur == token then
    redis.call('DEL', key)
    return {'missing', '', 0, '', '', 0}
  end
  return record(status or 'missing')
end
local retention = tonumber(ARGV[6])
if op == 'confirm' then
  if not status then return record('missing') end
  if status == 'reserving' and lease <= now then
    -- the attempt died without committing: it failed
    redis.call('HSET', key, 'status', 'failed', 'decided_at', now)
    return record('failed')
  end
  if status == 'reserved' then
    if now >= deadline then final('cancelled', 'expired', retention) else final('confirmed', 'confirmed', retention) end
  end
  return record(status)
elseif op == 'cancel' then
  if not status then
    redis.call('HSET', key, 'status', 'cancelled', 'reason', 'tombstone', 'decided_at', now)
    redis.call('EXPIRE', key, retention)
    return record('cancelled', 'tombstone')
  end
  if status == 'reserved' or status == 'reserving' or status == 'failed' then
    final('cancelled', 'cancelled', retention)
  end
  return record(status)
elseif op == 'expire' then
  if not status and not moved and token ~= '' then
    -- A part of attempt token is due and its order has no record: the
    -- attempt's stage or begin never landed. Record its failure, so a stale
    -- copy arriving later cannot stage it (staged.go).
    redis.call('HSET', key, 'status', 'failed', 'token', token, 'reason', 'no record', 'decided_at', now)
    redis.call('EXPIRE', key, retention)
    cur, reason = token, 'no record'
    return record('failed')
  end
  if status == 'reserved' and now >= deadline then
    final('cancelled', 'expired', retention)
  elseif status == 'reserving' and lease <= now then
    redis.call('HSET', key, 'status', 'failed', 'decided_at', now)
    status = 'failed'
  end
  return record(status or 'missing')
end
return redis.error_reply('SHARDIS_BADOP ' .. tostring(op))
`

// readStock reads and validates the counters of the stock hash KEYS[2]
// into v = {available, reserved, confirmed, loaded, limit}.
const readStock = `
local f = redis.call('HMGET', KEYS[2], 'available', 'reserved', 'confirmed', 'loaded', 'limit')
local v = {}
for i, what in ipairs({'available', 'reserved', 'confirmed', 'loaded', 'limit'}) do
  local n, err = int(f[i], KEYS[2] .. ' ' .. what)
  if err then return err end
  v[i] = n
end
`

// loadScript adds stock to one node and sets the SKU's per-user limit.
// KEYS: 1 stamp, 2 stock hash. ARGV: 4 quantity to add (may be 0), 5
// per-user limit (-1 = leave as is), 6 the limit's version (limits.go).
// Returns {available, reserved, confirmed, loaded, limit}.
var loadScript = newScript("load", true, readStock+`
local add, limit = tonumber(ARGV[4]), tonumber(ARGV[5])
if v[1] + add > 9007199254740000 or v[4] + add > 9007199254740000 then
  return redis.error_reply('SHARDIS_RANGE stock would exceed 2^53')
end
if add > 0 then
  v[1] = redis.call('HINCRBY', KEYS[2], 'available', add)
  v[4] = redis.call('HINCRBY', KEYS[2], 'loaded', add)
end
if limit >= 0 then
  redis.call('HSET', KEYS[2], 'limit', limit, 'limit_ver', ARGV[6])
  v[5] = limit
end
return v
`)

// stockScript reads one node's counters of a SKU.
// KEYS: 1 stamp, 2 stock hash. ARGV: the header only.
// Returns {available, reserved, confirmed, loaded, limit, exists}: exists
// is 1 when the stock hash exists, 0 when it does not (all counters 0).
var stockScript = newScript("stock", false, readStock+`
v[6] = redis.call('EXISTS', KEYS[2])
return v
`)
