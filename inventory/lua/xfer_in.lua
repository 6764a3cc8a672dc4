
if redis.call('EXISTS', KEYS[3]) == 1 then return 'already' end
local amt = {}
for i, what in ipairs({'available', 'confirmed', 'loaded', 'marker ttl'}) do
  local n, err = int(ARGV[4 + i], 'transfer ' .. what)
  if err then return err end
  amt[i] = n
end
local a, c, l, ttl = amt[1], amt[2], amt[3], amt[4]
if ARGV[4] == 'quota' then
  local _, err = int(redis.call('GET', KEYS[2]), KEYS[2])
  if err then return err end
  redis.call('INCRBY', KEYS[2], I(a))
elseif ARGV[4] == 'stock' then
  for _, what in ipairs({'available', 'confirmed', 'loaded'}) do
    local _, err = int(redis.call('HGET', KEYS[2], what), KEYS[2] .. ' ' .. what)
    if err then return err end
  end
  redis.call('HINCRBY', KEYS[2], 'available', I(a))
  redis.call('HINCRBY', KEYS[2], 'confirmed', I(c))
  redis.call('HINCRBY', KEYS[2], 'loaded', I(l))
else
  return redis.error_reply('SHARDIS_BADOP transfer kind ' .. tostring(ARGV[4]))
end
redis.call('SET', KEYS[3], '1', 'EX', I(ttl))
return 'done'
