
local key = KEYS[2]
local t = order_get(key)
if not t then return {'none'} end
if t.moved and t.moved ~= ARGV[4] then return {'none'} end
-- its inline parts get their records first: they stay here (inline.go)
inline_write(key, t)
-- marked (again, the same mark: a record marked before is written back
-- as it was, packed when the hash layout held it)
t.moved = ARGV[4]
local v = order_put(key, t)
return {'moved', redis.call('PTTL', key), v}
