
local op, id = ARGV[4], ARGV[5]
-- the part's member in the index (pending_index.lua); a part a release
-- before indexed by its id is moved to its member when rescheduled. A
-- record gone, or one it cannot read (bad), says no member: the stuck op
-- takes the one its caller read from the index (ARGV[9]), when it stands
-- for this part.
local f, bad = part_try(KEYS[3])
-- a tombstone of a part listed here stands for its lost record
-- (pend_lost): no member of its own, no backoff kept on it
if f and f.tombstone == '1' then f = nil end
local m = pend_member(id, f)
-- the member the due listing read (later: ARGV[7], drop: ARGV[6], stuck:
-- ARGV[9]; absent or '' when the caller has none) is taken instead when it
-- is another place that stands for this part: the record names no place
-- (gone, unreadable, or re-created by hand without its redo and offset)
-- while the index holds the part by its place. Left there, the place of
-- a settled part outlived the drop, and once the settled record expired
-- read as a part whose record was lost while pending (set aside, settled
-- a second time by SettleStuckLost)
local lm = ARGV[({later = 7, drop = 6, stuck = 9})[op] or 0]
if lm and lm ~= '' and lm ~= m and lm ~= id and pend_id(lm) == id then m = lm end
if op == 'later' then
  -- ARGV[6]: when, in ms of the node's clock, or '+ms' from its now (a
  -- delay the caller's clock must not shift: the index is read by the
  -- node's clock)
  local at = ARGV[6]
  if string.sub(at, 1, 1) == '+' then at = now + tonumber(string.sub(at, 2)) else at = tonumber(at) end
  if m ~= id and redis.call('ZREM', KEYS[2], id) == 1 then
    return redis.call('ZADD', KEYS[2], at, m) - 1
  end
  return redis.call('ZADD', KEYS[2], 'XX', at, m)
elseif op == 'drop' then
  -- only a part known not pending: one whose record cannot be read may be
  if bad or (f or {}).state == 'pending' then return 0 end
  return redis.call('ZREM', KEYS[2], m, id)
elseif op == 'stuck' then
  if redis.call('ZREM', KEYS[2], m, id) == 0 then return 0 end
  local since, delay, tries = now, tonumber(ARGV[8]), 1
  if f then
    -- the backoff lives on the part's record, which expires with it
    since = tonumber(f.stuck_since) or now
    tries = (tonumber(f.stuck_tries) or 0) + 1
    delay = math.min(tonumber(ARGV[7]) * 2 ^ math.min(tries - 1, 40), delay)
    f.stuck_since, f.stuck_tries = I(since), I(tries)
    part_put(KEYS[3], f)
  end
  redis.call('ZADD', KEYS[4], I(since), id)
  redis.call('HSET', KEYS[5], id, ARGV[6])
  redis.call('ZADD', KEYS[6], I(now + delay), id)
  return tries
elseif op == 'retry' then
  if redis.call('ZREM', KEYS[4], id) == 0 then return 0 end
  redis.call('HDEL', KEYS[5], id)
  redis.call('ZREM', KEYS[6], id)
  if f and f.stuck_tries then
    f.stuck_tries = nil
    part_put(KEYS[3], f)
  end
  redis.call('ZADD', KEYS[2], now, m)
  return 1
end
return redis.error_reply('SHARDIS_BADOP ' .. tostring(op))
