
local key = KEYS[2]
-- the record the caller encoded (rectemplate.go), the node's values in
-- its holes: created, then each part's offset (none for a quota part);
-- it replaces a failed or moved record, reserved: no TTL until decided
-- (orderrec.go)
if #CKEYS == 2 then
  -- one stock part (one item, no user), in the call's short layout, the
  -- only one with a context (localOneCall: ARGV 4 the record's template
  -- up to its created, 5 the part's id, and 6 the template's tail after
  -- the offset, only when it is not LOCAL_TAIL, the tail of a part with
  -- no incarnation and the id the reserve paths derive, which every local
  -- part is; CKEYS 1 its counter, 2 its redo queue; CARGV 1 ttl, 2 the
  -- template between its created and the part's offset, 3 the part's
  -- quantity): plan_one and
  -- take_stock, without the plan's tables; the part is inline (no record
  -- of its own: the order record holds it, inline.go), as every stock part
  -- of this script is, so it has no key to send. The record is set only
  -- if its key is missing, between the plan and the take, so the usual
  -- order (no record) does not read it first; a refusal, or a key that
  -- exists, reads the record's head and answers as the general path below
  -- does: {'existing'} for a record to keep, with nothing written. The
  -- script is atomic, so no one sees these steps in another order.
  local times = local_times(CARGV[1]) -- deadline, part deadline, reply head
  local ck, xk, want = CKEYS[1], CKEYS[2], Nqty(CARGV[3])
  local avail, resv, short, last, seg = plan_one(nil, ck, xk, want, '')
  if not avail then
    if order_kept(key) then return {'existing'} end
    if resv then return resv end -- an error reply
    return {short and 'short' or 'fallback'}
  end
  -- the pending index must be a sorted set (zset_ok's test inline: a Lua
  -- call costs the node about 600 instructions)
  if not zchecked[PENDING] then zset_ok(PENDING) end
  -- the offset take_stock hands out (offset_at's, inline, unless plan_one
  -- has it)
  local off = (last or offtab[REDO_OFFSETS][xk][1]) + 1
  local offS = I(off)
  local tail = LOCAL_TAIL
  if #ARGV == 6 then tail = ARGV[6] end
  local rec = ARGV[4] .. nowS .. CARGV[2] .. offS .. tail
  if redis.call('SETNX', key, rec) == 0 then
    if order_kept(key) then return {'existing'} end
    set_value(key, rec, false)
  end
  -- take_stock's writes, its offset and string at hand (its part inline:
  -- no record)
  take_at(ck, xk, ARGV[5], avail, resv, off, offS, seg or redo_seg(xk, off), times[2], pend_pos(xk, offS))
  return times[3] .. ':' .. offS
end
local np = (#KEYS - 2) / 3
local deadline = now + Nttl(ARGV[5])
local pdl = deadline + PART_GRACE
if order_kept(key) then return {'existing'} end
zset_ok(PENDING) -- the pending index must be a sorted set
local plan, err, short, over = plan_parts(KEYS, ARGV, kb + 3, ab + 8 + np, np, ARGV[4], true)
if err then return err end
if over then return {'limit', over[1], over[2], over[3]} end
if not plan then return {short and 'short' or 'fallback'} end
-- its stock parts inline too (inline.go); a quota part has its record
local offs = write_parts(plan, pdl, true)
local rec, out = {ARGV[6], nowS, ARGV[7]}, {reserved_head(deadline)}
for i, off in ipairs(offs) do
  local offS = I(off)
  rec[#rec + 1] = off ~= 0 and offS or ''
  rec[#rec + 1] = ARGV[7 + i]
  out[#out + 1] = offS
end
set_value(key, table.concat(rec), false)
return table.concat(out, ':')
