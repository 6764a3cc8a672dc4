
-- limit_sync.lua's rule, for a copy: a node that holds a newer version (a
-- change made at the new epoch reached it) keeps its limit
local v = tonumber(redis.call('HGET', KEYS[2], 'limit_ver')) or 0
local nv = tonumber(ARGV[3]) or 0
if v > nv then return 'kept' end
if v == nv and redis.call('HGET', KEYS[2], 'limit') == ARGV[2] then return 'kept' end
redis.call('HSET', KEYS[2], 'limit', ARGV[2], 'limit_ver', ARGV[3])
return 'ok'
