
if ARGV[5] == '' then
  -- a drop names the value its caller read (ARGV 6): a newer change
  -- recorded since, in the same field, stays (limits.go)
  if ARGV[6] and redis.call('HGET', KEYS[2], ARGV[4]) ~= ARGV[6] then return 0 end
  return redis.call('HDEL', KEYS[2], ARGV[4])
end
local cur = redis.call('HGET', KEYS[2], ARGV[4])
if cur then
  local cl, cv = string.match(cur, '^([^:]*):([^:]*):')
  local nl, nv = string.match(ARGV[5], '^([^:]*):([^:]*):')
  cl, cv, nl, nv = tonumber(cl), tonumber(cv), tonumber(nl), tonumber(nv)
  -- load.lua's rule: a newer version, or the same one with a higher limit
  if cv and nv and (cv > nv or (cv == nv and cl and nl and cl >= nl)) then return 0 end
end
return redis.call('HSET', KEYS[2], ARGV[4], ARGV[5])
