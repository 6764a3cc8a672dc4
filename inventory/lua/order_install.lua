
local key = KEYS[2]
local _, moved = order_head(key)
if redis.call('EXISTS', key) == 1 and not moved then return 'exists' end
local t = order_unpack(ARGV[5])
t.moved = nil
-- a record the local reserve wrote (reserved, no reserved_at) is its
-- inline parts' only holder on the node it was written on, and there
-- alone (inline.go): the move wrote their records there first
-- (order_move_out.lua). Installed, it is no longer that write, so it gets
-- its created as its reserved_at (the local reserve reserved it when it
-- created it) and no script reads an inline part from it again, on this
-- node or, moved back, on that one, whose part records may since have
-- been lost with an older snapshot
if t.status == 'reserved' and not t.reserved_at then t.reserved_at = t.created end
redis.call('DEL', key)
order_put(key, t)
local pttl = tonumber(ARGV[4])
if pttl and pttl > 0 then redis.call('PEXPIRE', key, I(pttl)) end
return 'installed'
