
local op = ARGV[4]
if op == 'ack' then
  local cur = tonumber(redis.call('HGET', KEYS[2], KEYS[4])) or 0
  local head = tonumber(redis.call('HGET', KEYS[3], KEYS[4])) or 0
  local off = tonumber(ARGV[5])
  if off > head then
    return redis.error_reply('SHARDIS_RANGE ack offset ' .. ARGV[5] .. ' is past the head of ' .. KEYS[4] .. ' (last offset handed out ' .. head .. ')')
  end
  if off > cur then redis.call('HSET', KEYS[2], KEYS[4], off) return off end
  return cur
elseif op == 'trim' then
  local maxAge, batch, removed = tonumber(ARGV[5]), tonumber(ARGV[6]), 0
  for k = 4, #KEYS do
    local acked = tonumber(redis.call('HGET', KEYS[2], KEYS[k])) or 0
    local e = redis.call('ZRANGE', KEYS[k], 0, batch - 1, 'WITHSCORES')
    for i = 1, #e, 2 do
      local p = part_get(partPrefix .. e[i]) or {}
      local f = {p.state or false, p.at}
      local settled = f[1] == false or f[1] == 'confirmed' or f[1] == 'cancelled'
      local old = maxAge > 0 and (f[1] == false or (tonumber(f[2]) or 0) + maxAge <= now)
      if not settled or not (tonumber(e[i + 1]) <= acked or old) then break end
      redis.call('ZREM', KEYS[k], e[i])
      removed = removed + 1
    end
  end
  return removed
end
return redis.error_reply('SHARDIS_BADOP ' .. tostring(op))
