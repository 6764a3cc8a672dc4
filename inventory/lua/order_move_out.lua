
local key = KEYS[2]
if redis.call('EXISTS', key) == 0 then return {'none'} end
local mark = redis.call('HGET', key, 'moved')
if mark and mark ~= ARGV[4] then return {'none'} end
if not mark then redis.call('HSET', key, 'moved', ARGV[4]) end
return {'moved', redis.call('PTTL', key), redis.call('HGETALL', key)}
