
local f = redis.call('HMGET', KEYS[3], 'a', 'c', 'l', 'kind')
if not f[4] then return 'none' end
local amt = {}
for i, what in ipairs({'a', 'c', 'l'}) do
  local n, err = int(f[i], KEYS[3] .. ' ' .. what)
  if err then return err end
  amt[i] = n
end
local a, c, l = amt[1], amt[2], amt[3]
if f[4] == 'quota' then
  local _, err = int(redis.call('GET', KEYS[2]), KEYS[2])
  if err then return err end
  if redis.call('DECRBY', KEYS[2], I(a)) <= 0 then redis.call('DEL', KEYS[2]) end
elseif f[4] == 'stock' then
  for _, what in ipairs({'available', 'confirmed', 'loaded'}) do
    local _, err = int(redis.call('HGET', KEYS[2], what), KEYS[2] .. ' ' .. what)
    if err then return err end
  end
  redis.call('HINCRBY', KEYS[2], 'available', I(-a))
  redis.call('HINCRBY', KEYS[2], 'confirmed', I(-c))
  redis.call('HINCRBY', KEYS[2], 'loaded', I(-l))
else
  return redis.error_reply('SHARDIS_CORRUPT ' .. KEYS[3] .. ' kind is ' .. tostring(f[4]))
end
redis.call('DEL', KEYS[3])
return 'done'
