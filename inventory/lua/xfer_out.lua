
if ARGV[4] ~= 'quota' and ARGV[4] ~= 'stock' then
  return redis.error_reply('SHARDIS_BADOP transfer kind ' .. tostring(ARGV[4]))
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  local f = redis.call('HMGET', KEYS[3], 'a', 'c', 'l')
  local out = {'recorded'}
  for i, what in ipairs({'a', 'c', 'l'}) do
    local n, err = int(f[i], KEYS[3] .. ' ' .. what)
    if err then return err end
    out[i + 1] = n
  end
  return out
end
local a, c, l = 0, 0, 0
local err
if ARGV[4] == 'quota' then
  a, err = int(redis.call('GET', KEYS[2]), KEYS[2])
  if err then return err end
else
  local f = redis.call('HMGET', KEYS[2], 'available', 'confirmed', 'loaded', 'reserved')
  local r
  a, err = int(f[1], KEYS[2] .. ' available') if err then return err end
  c, err = int(f[2], KEYS[2] .. ' confirmed') if err then return err end
  l, err = int(f[3], KEYS[2] .. ' loaded') if err then return err end
  r, err = int(f[4], KEYS[2] .. ' reserved') if err then return err end
  if r ~= 0 then return {'busy', r, 0, 0} end
end
if a == 0 and c == 0 and l == 0 then return {'none', 0, 0, 0} end
redis.call('HSET', KEYS[3], 'a', I(a), 'c', I(c), 'l', I(l), 'kind', ARGV[4], 'key', KEYS[2], 'dest', ARGV[5])
return {'recorded', a, c, l}
