
local v, err = int(redis.call('HGET', KEYS[2], 'limit_ver'), KEYS[2] .. ' limit_ver')
if err then return err end
local nv, cur = tonumber(ARGV[5]), 0
if v == nv then
  cur, err = int(redis.call('HGET', KEYS[2], 'limit'), KEYS[2] .. ' limit')
  if err then return err end
end
-- load.lua's rule: a newer version, or the same one with a higher limit
-- (a tie of two changes ends at the higher on every node)
if v < nv or (v == nv and cur < tonumber(ARGV[4])) then
  redis.call('HSET', KEYS[2], 'limit', ARGV[4], 'limit_ver', ARGV[5])
end
return v
