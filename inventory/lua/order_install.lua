
local key = KEYS[2]
local _, moved = order_head(key)
if redis.call('EXISTS', key) == 1 and not moved then return 'exists' end
local t = order_unpack(ARGV[5])
t.moved = nil
redis.call('DEL', key)
order_put(key, t)
local pttl = tonumber(ARGV[4])
if pttl and pttl > 0 then redis.call('PEXPIRE', key, I(pttl)) end
return 'installed'
