
local op, limit = ARGV[4], tonumber(ARGV[5])
local ids = {}
if op == 'due' then
  ids = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, limit)
elseif op == 'sku' then
  local pre = ARGV[7]
  for _, id in ipairs(redis.call('ZRANGE', KEYS[3], 0, limit - 1)) do
    -- a record it cannot read names no counter: left for its backoff
    local c = (part_try(partPrefix .. id) or {}).counter
    if c and (c == ARGV[6] or string.sub(c, 1, #pre) == pre) then ids[#ids + 1] = id end
  end
else
  return redis.error_reply('SHARDIS_BADOP ' .. tostring(op))
end
local moved = 0
for _, id in ipairs(ids) do
  -- the record is read before anything moves: a part whose record cannot
  -- be read, or is gone, stays set aside, with its reason (a failed read
  -- after the removals below left it in no index, its units reserved for
  -- good; moved, it would only be set aside again); its next retry comes
  -- as long after now as it has been set aside, at most ARGV[6] ms (the
  -- 'due' op's longest wait). A part settled while set aside left the
  -- stuck index then (part_settle), so one gone here never settled.
  local p, bad = part_try(partPrefix .. id)
  -- a tombstone of a part set aside stands for its lost record (pend_lost)
  if bad or not p or p.tombstone == '1' then
    local since = tonumber(redis.call('ZSCORE', KEYS[3], id))
    if not since then
      redis.call('ZREM', KEYS[5], id) -- a retry time of a part not set aside
    elseif op == 'due' then
      redis.call('ZADD', KEYS[5], I(now + math.min(math.max(now - since, 1000), tonumber(ARGV[6]))), id)
    end
  else
    redis.call('ZREM', KEYS[5], id)
    if redis.call('ZREM', KEYS[3], id) == 1 then
      redis.call('HDEL', KEYS[4], id)
      if op == 'sku' and p and p.stuck_tries then
        p.stuck_tries = nil
        part_put(partPrefix .. id, p)
      end
      redis.call('ZADD', KEYS[2], nowS, pend_member(id, p)) -- pending_index.lua
      moved = moved + 1
    end
  end
end
return moved
