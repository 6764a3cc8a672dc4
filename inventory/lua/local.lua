
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
  -- quantity): plan_parts' and take_stock's steps for it, written out
  -- below; the part is inline (no record of its own: the order record
  -- holds it, inline.go), as every stock part of this script is, so it
  -- has no key to send. The record is set only
  -- if its key is missing, between the plan and the take, so the usual
  -- order (no record) does not read it first; a refusal, or a key that
  -- exists, reads the record's head and answers as the general path below
  -- does: {'existing'} for a record to keep, with nothing written. The
  -- script is atomic, so no one sees these steps in another order.
  local times = local_times(CARGV[1]) -- deadline, part deadline, reply head
  local ck, xk, want = CKEYS[1], CKEYS[2], Nqty(CARGV[3])
  -- plan_parts then take_stock, their steps for one part (and the
  -- helpers' they call: stock_int, offsets_ok, redo_ok, take_at,
  -- pend_pos) written out on the copies the helpers keep (prelude.lua:
  -- stocks, offtab, zchecked, zqueued, pendq; the segment's key from
  -- redo_seg), as reserve.lua's and stage_take.lua's one part have them:
  -- a Lua call costs the node about 600 instructions, and this is every
  -- minted order's path (take_whole.lua). The checks in plan_parts'
  -- order: the counter's available and reserved, the queue's offsets, its
  -- next offset's segment (raised, as redo_ok does), the counter's limit.
  local v, o = stocks[ck], offtab[REDO_OFFSETS]
  o = o and o[xk]
  local avail, limit, resv, err
  if v and v[4] and v[5] and v[6] then
    avail, limit, resv = v[4], v[5], v[6]
  else
    avail, err = stock_int(ck, 1, ' available')
    if not err then resv, err = stock_int(ck, 3, ' reserved') end
    v = stocks[ck]
  end
  if not (err or o) then
    local _
    _, err = offsets_ok(REDO_OFFSETS, xk)
    o = offtab[REDO_OFFSETS][xk]
  end
  local off, seg
  if not err then
    off = o[1] + 1 -- the offset take_stock hands out
    seg = redo_seg(xk, off)
    if not zchecked[seg] then zset_ok(seg) end
    if not limit then limit, err = stock_int(ck, 2, ' limit') end
  end
  -- a limited SKU needs a user, which this layout never has
  if err or avail < want or limit > 0 then
    if order_kept(key) then return {'existing'} end
    if err then return err end
    return {'short'}
  end
  -- the pending index must be a sorted set (zset_ok's test inline)
  if not zchecked[PENDING] then zset_ok(PENDING) end
  local offS = I(off)
  local tail = LOCAL_TAIL
  if #ARGV == 6 then tail = ARGV[6] end
  local rec = ARGV[4] .. nowS .. CARGV[2] .. offS .. tail
  if redis.call('SETNX', key, rec) == 0 then
    if order_kept(key) then return {'existing'} end
    set_value(key, rec, false)
  end
  -- take_at's deferred writes, its arguments named as there (its part
  -- inline: no record)
  local pq = pendq[xk] -- pend_pos's
  if not pq then
    pq = string.sub(xk, #PFX_REDO + 1) .. ':'
    pendq[xk] = pq
  end
  local id, pdlS, member, take = ARGV[5], times[2], pq .. offS, want
  o[1] = off
  if not o[2] then offsets_dirty(o) end
  v[4], v[6] = avail - take, resv + take
  if not v[7] then stock_dirty(ck, v) end
  local q = zqueued[seg]
  if q then
    q[#q + 1] = offS
    q[#q + 1] = id
  else
    zqueue(seg, offS, id)
  end
  q = zqueued[PENDING]
  if q then
    q[#q + 1] = pdlS
    q[#q + 1] = member
  else
    zqueue(PENDING, pdlS, member)
  end
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
