
if ARGV[5] == '' then return redis.call('HDEL', KEYS[2], ARGV[4]) end
local cur = redis.call('HGET', KEYS[2], ARGV[4])
if cur then
  local cv = tonumber(string.match(cur, '^[^:]*:([^:]*):'))
  local nv = tonumber(string.match(ARGV[5], '^[^:]*:([^:]*):'))
  if cv and nv and cv >= nv then return 0 end
end
return redis.call('HSET', KEYS[2], ARGV[4], ARGV[5])
