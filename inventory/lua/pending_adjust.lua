
local op = ARGV[4]
if op == 'later' then
  return redis.call('ZADD', KEYS[2], 'XX', tonumber(ARGV[6]), ARGV[5])
elseif op == 'drop' then
  if (part_get(KEYS[3]) or {}).state == 'pending' then return 0 end
  return redis.call('ZREM', KEYS[2], ARGV[5])
elseif op == 'stuck' then
  if redis.call('ZREM', KEYS[2], ARGV[5]) == 0 then return 0 end
  local since, delay, tries = now, tonumber(ARGV[8]), 1
  local f = part_get(KEYS[3])
  if f then
    -- the backoff lives on the part's record, which expires with it
    since = tonumber(f.stuck_since) or now
    tries = (tonumber(f.stuck_tries) or 0) + 1
    delay = math.min(tonumber(ARGV[7]) * 2 ^ math.min(tries - 1, 40), delay)
    f.stuck_since, f.stuck_tries = I(since), I(tries)
    part_put(KEYS[3], f)
  end
  redis.call('ZADD', KEYS[4], I(since), ARGV[5])
  redis.call('HSET', KEYS[5], ARGV[5], ARGV[6])
  redis.call('ZADD', KEYS[6], I(now + delay), ARGV[5])
  return tries
elseif op == 'retry' then
  if redis.call('ZREM', KEYS[4], ARGV[5]) == 0 then return 0 end
  redis.call('HDEL', KEYS[5], ARGV[5])
  redis.call('ZREM', KEYS[6], ARGV[5])
  local f = part_get(KEYS[3])
  if f and f.stuck_tries then
    f.stuck_tries = nil
    part_put(KEYS[3], f)
  end
  redis.call('ZADD', KEYS[2], now, ARGV[5])
  return 1
end
return redis.error_reply('SHARDIS_BADOP ' .. tostring(op))
