
local key = KEYS[2]
local _, moved = order_head(key)
local before
if redis.call('EXISTS', key) == 1 and not moved then
  if ARGV[6] ~= 'replace' then return 'exists' end
  -- a put back (apply_putback.go) replaces the live record in place: a
  -- stale copy that came back with the node's data, or the same record a
  -- concurrent or earlier put back wrote. Its inline parts get their
  -- records first, as at a move (order_move_out.lua), so the reconcilers
  -- settle the units they hold here
  inline_write(key, order_get(key))
  before = redis.pcall('GET', key)
end
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
local v = order_put(key, t)
local pttl = tonumber(ARGV[4])
if pttl and pttl > 0 then redis.call('PEXPIRE', key, I(pttl)) end
-- a put back is remembered (KEYS[3], ARGV[7] s), so no retirement of its
-- change marks what it wrote (order_move_out.lua)
if ARGV[6] == 'replace' then redis.call('SET', KEYS[3], '1', 'EX', ARGV[7]) end
-- replaced by the same value: put back before
if v == before then return 'exists' end
return 'installed'
