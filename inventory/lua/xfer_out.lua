
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
local a, c, l, r, err = xfer_amounts()
if err then return err end
if r ~= 0 then return {'busy', r, 0, 0} end
if a == 0 and c == 0 and l == 0 then return {'none', 0, 0, 0} end
redis.call('HSET', KEYS[3], 'a', I(a), 'c', I(c), 'l', I(l), 'kind', ARGV[4], 'key', KEYS[2], 'dest', ARGV[5])
return {'recorded', a, c, l}
