
local v, err = int(redis.call('HGET', KEYS[2], 'limit_ver'), KEYS[2] .. ' limit_ver')
if err then return err end
if v < tonumber(ARGV[5]) then
  redis.call('HSET', KEYS[2], 'limit', ARGV[4], 'limit_ver', ARGV[5])
end
return v
