
local f = redis.call('HMGET', KEYS[2], 'available', 'reserved', 'confirmed', 'loaded', 'limit')
local v = {}
for i, what in ipairs({'available', 'reserved', 'confirmed', 'loaded', 'limit'}) do
  local n, err = int(f[i], KEYS[2] .. ' ' .. what)
  if err then return err end
  v[i] = n
end
