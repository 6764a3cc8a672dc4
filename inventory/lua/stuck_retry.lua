
local op, limit = ARGV[4], tonumber(ARGV[5])
local ids = {}
if op == 'due' then
  ids = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, limit)
elseif op == 'sku' then
  local pre = ARGV[7]
  for _, id in ipairs(redis.call('ZRANGE', KEYS[3], 0, limit - 1)) do
    local c = (part_get(partPrefix .. id) or {}).counter
    if c and (c == ARGV[6] or string.sub(c, 1, #pre) == pre) then ids[#ids + 1] = id end
  end
else
  return redis.error_reply('SHARDIS_BADOP ' .. tostring(op))
end
local moved = 0
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[5], id)
  if redis.call('ZREM', KEYS[3], id) == 1 then
    redis.call('HDEL', KEYS[4], id)
    local p = part_get(partPrefix .. id)
    if op == 'sku' and p and p.stuck_tries then
      p.stuck_tries = nil
      part_put(partPrefix .. id, p)
    end
    redis.call('ZADD', KEYS[2], nowS, pend_member(id, p)) -- pending_index.lua
    moved = moved + 1
  end
end
return moved
