
local f = redis.call('HMGET', KEYS[3], 'a', 'c', 'l', 'kind')
if not f[4] then return 'none' end
local a, c, l = tonumber(f[1]), tonumber(f[2]), tonumber(f[3])
if f[4] == 'quota' then
  if redis.call('DECRBY', KEYS[2], a) <= 0 then redis.call('DEL', KEYS[2]) end
else
  redis.call('HINCRBY', KEYS[2], 'available', -a)
  redis.call('HINCRBY', KEYS[2], 'confirmed', -c)
  redis.call('HINCRBY', KEYS[2], 'loaded', -l)
end
redis.call('DEL', KEYS[3])
return 'done'
