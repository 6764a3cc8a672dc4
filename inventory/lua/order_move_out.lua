
local key = KEYS[2]
-- a retirement (apply_retire.go) names the memory of a put back of the
-- change it runs for (KEYS[3], apply_putback.go): a record a put back
-- wrote is the order's newest surviving one, never retired
if KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1 then return {'kept'} end
local t = order_get(key)
if not t then return {'none'} end
if t.moved and t.moved ~= ARGV[4] then return {'none'} end
-- moved before at this mark (a rerun's sweep, a touch: its install may
-- have landed) and undecided then: the order's live record that install
-- wrote lives at least the retention (ARGV[5] s, moveOrder's) from the
-- order's due (order.lua, final: the deadline plus PART_GRACE, moved on
-- by the commit's lag) by its new home's clock, SKEW (two PART_GRACEs:
-- node clocks each within a second of true time) told apart from this
-- one's. Past that, it may have lived out its retention there, so this
-- copy, as it was before any decision, is moved no more: installed where
-- the live record expired it would bring the order back undecided and
-- without a TTL, and the expiry would then cancel a part of a confirmed
-- order (TestMovedCopyOutlivingItsRecordIsNotReinstalled; a put back,
-- apply_putback.go, reads the copy by the same rule: a node that went
-- back after that record expired there would get the order back
-- reserved, TestPutBackOfACopyOutlivingItsRecordIsRefused). Where no
-- install landed, the order is as one whose record lived out its
-- retention (stuck.go: its parts go to an operator); never before its
-- deadline by the new home's clock, for the retention is at least 3 s
-- (config.MinRetention: TestRetentionBelowTheSkewBoundIsRefused, a
-- Confirm of a reservation lost before that bound). The copy gets the
-- retention if it has no TTL (expireMoved does not follow 'none').
if t.moved and ARGV[5] and t.status ~= 'confirmed' and t.status ~= 'cancelled' and t.status ~= 'failed' then
  local deadline = tonumber(t.deadline) or 0
  if deadline > 0 then
    local due = deadline + PART_GRACE
    local ra, cr = tonumber(t.reserved_at), tonumber(t.created)
    if ra and cr and ra > cr then due = due + (ra - cr) end
    local retention = tonumber(ARGV[5]) * 1000
    if now + 2 * PART_GRACE >= due + retention then
      if redis.call('PTTL', key) == -1 then redis.call('PEXPIRE', key, I(retention)) end
      return {'none'}
    end
  end
end
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
