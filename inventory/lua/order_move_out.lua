
local key = KEYS[2]
-- a retirement (apply_retire.go) names the memory of a put back of the
-- change it runs for (KEYS[3], apply_putback.go): a record a put back
-- wrote is the order's newest surviving one, never retired
if KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1 then return {'kept'} end
local t = order_get(key)
if not t then return {'none'} end
if t.moved and t.moved ~= ARGV[4] then return {'none'} end
-- its inline parts get their records first: they stay here (inline.go)
inline_write(key, t)
-- marked (again, the same mark: a record marked before is written back
-- as it was, packed when the hash layout held it)
t.moved = ARGV[4]
local v = order_put(key, t)
-- the TTL the record has where it lives next: a reserved record has none
-- (orderrec.go, "TTL"), though its copy here may have one (the retention
-- a copy gets once its install landed: order_moved_expire.lua), which an
-- install must not copy; any other keeps its own. frozen: 1 when the
-- copy has no TTL (then expireMoved gives it one), else 0
local own = redis.call('PTTL', key)
local pttl, frozen = -1, 0
if t.status ~= 'reserved' then pttl = own end
if own == -1 then frozen = 1 end
return {'moved', pttl, v, frozen}
