
-- one stock part (an order's only part on this node, the usual case) in
-- the call's short layout, the only one with a context (reserveCall:
-- KEYS 2 its part key; ARGV 4 its id, 5 the second piece of its record's
-- template, the first being a pending stock part's, PNEW_STOCK; CKEYS 1
-- its counter, 2 its redo queue; CARGV 1 the deadline, 2 its want)
local one = #CKEYS == 2
local deadline = part_due(one and CARGV[1] or ARGV[5])
local np = (#KEYS - 1) / 3
-- fails now, before any write, if the index is not a sorted set
-- (zset_ok's test inline: a Lua call costs the node about 600
-- instructions, and this runs once per call of the group)
if not zchecked[PENDING] then zset_ok(PENDING) end
if one then
  -- the steps below for the one stock part, without the plan's tables,
  -- and with the part's key read only when it is there: the record is set
  -- only if its key is missing (SET NX) once the take is planned, before
  -- anything else is written; a refusal, an error, or a key that is there
  -- reads the part as the plan below does first, and answers the same.
  -- The script is atomic, so no one sees these steps in another order
  -- (TestTakeOneAsPlan holds the two against each other on a node).
  local pk, ck, xk, id, want = KEYS[2], CKEYS[1], CKEYS[2], ARGV[4], Nqty(CARGV[2])
  -- straight through, the helpers' steps written out (a Lua call costs
  -- the node about 600 instructions, and calling them made seven more
  -- per take): the copies the helpers keep (prelude.lua: stocks, offtab,
  -- zchecked, zqueued, pendq; the segment's key from redo_seg) are read
  -- and changed here as the helpers would (stock_int, offsets_ok,
  -- redo_ok, part_new, take_at, pend_pos), checked in the plan's order
  -- (below) but for the segment, checked last: the counter's
  -- available and reserved, the queue's offsets, the counter's limit,
  -- the segment
  local v, o = stocks[ck], offtab[REDO_OFFSETS]
  o = o and o[xk]
  local avail, limit, resv
  if v and v[4] and v[5] and v[6] then
    avail, limit, resv = v[4], v[5], v[6]
  else
    local err
    avail, err = stock_int(ck, 1, ' available')
    if err then return part_held(pk) or err end
    resv, err = stock_int(ck, 3, ' reserved')
    if err then return part_held(pk) or err end
    v = stocks[ck]
  end
  if not o then
    local _, oerr = offsets_ok(REDO_OFFSETS, xk)
    if oerr then return part_held(pk) or oerr end
    o = offtab[REDO_OFFSETS][xk]
  end
  if not limit then
    local err
    limit, err = stock_int(ck, 2, ' limit')
    if err then return part_held(pk) or err end
  end
  local take = want
  if avail < want then take = avail end
  if take <= 0 then return part_held(pk) or {'none', 0, 0, limit} end
  local off = o[1] + 1 -- the offset next_offset hands out
  -- its redo segment must be a sorted set (redo_ok's check), its
  -- WRONGTYPE error answered, not raised: a part with a state answers
  -- first, as below (a pcall around redo_ok cost the node about 4,000
  -- instructions per call, callgrind)
  local seg = redo_seg(xk, off)
  if not zchecked[seg] then
    local r = redis.pcall('ZCARD', seg)
    if type(r) == 'table' and r.err then return part_held(pk) or r end
    zchecked[seg] = true
  end
  local offS, deadlineS = I(off), Idl(deadline)
  -- part_new's record, set only if its key is missing; a key without a
  -- state is written over, as below
  local rec = PNEW_STOCK .. Iq(take) .. '\031' .. offS .. ARGV[5] .. deadlineS .. '\031' .. nowS
  if redis.call('SETNX', pk, rec) ~= 1 then
    local h = part_held(pk)
    if h then return h end
    set_value(pk, rec)
  end
  -- take_at's deferred writes, its arguments named as there
  local pq = pendq[xk] -- pend_pos's
  if not pq then
    pq = string.sub(xk, #PFX_REDO + 1) .. ':'
    pendq[xk] = pq
  end
  local pdlS, member = deadlineS, pq .. offS
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
  -- one string, not a table (prelude.lua, reserved_head says why): the
  -- offset alone for the usual take (the part taken in full, the SKU
  -- without a limit: no string to build), else the state word, the
  -- units taken, the offset and the limit; a limit of 0 or less is no
  -- limit, answered 0 (the caller reads only whether it is above 0)
  if take == want and limit <= 0 then return offS end
  return pending_head(take) .. ':' .. offS .. ':' .. (limit > 0 and string.format('%d', limit) or '0')
end
local plan = {}
local avail, resv, nq = {}, {}, {}
for i = 0, np - 1 do
  local pk, ck, xk = KEYS[2 + i * 3], KEYS[3 + i * 3], KEYS[4 + i * 3]
  local a = 6 + i * 6
  local p = {pk = pk, ck = ck, xk = xk, id = ARGV[a], kind = ARGV[a + 1], want = Nqty(ARGV[a + 2]),
             queue = ARGV[a + 3], ra = ARGV[a + 4], rb = ARGV[a + 5]}
  -- part_read, not part_get: the part of a one-round or general attempt,
  -- whose token never names a record the local path wrote, is never
  -- inline (inline.go), and a new part's key is missing: part_get would
  -- read the order key for nothing
  local cur = part_read(pk)
  if cur and cur.state then
    p.out = {cur.state, tonumber(cur.qty) or 0, tonumber(cur.offset) or 0, 0}
  elseif p.kind == 's' then
    local err
    if avail[ck] == nil then
      avail[ck], err = stock_int(ck, 1, ' available')
      if err then return err end
      resv[ck], err = stock_int(ck, 3, ' reserved')
      if err then return err end
    end
    local _, oerr = offsets_ok(REDO_OFFSETS, p.xk)
    if oerr then return oerr end
    local limit
    limit, err = stock_int(ck, 2, ' limit')
    if err then return err end
    local take = math.min(avail[ck], p.want)
    if take > 0 then
      nq[xk] = (nq[xk] or 0) + 1
      redo_ok(REDO_OFFSETS, xk, nq[xk]) -- its redo segment must be a sorted set
      avail[ck], resv[ck] = avail[ck] - take, resv[ck] + take
      p.avail, p.resv = avail[ck], resv[ck] -- the hash's values once this part is taken
      p.take = take
      p.out = {'pending', take, 0, limit}
    else
      p.out = {'none', 0, 0, limit}
    end
  else
    local limit, err = int(redis.call('HGET', xk, 'limit'), xk, ' limit')
    if err then return err end
    local held
    held, err = int(redis.call('GET', ck), ck)
    if err then return err end
    local other = tonumber(p.queue) or 0
    if limit <= 0 then
      -- counted even without a limit, so a limit set later sees it
      p.take = p.want
      p.out = {'pending', p.want, 0, 0}
    elseif other < 0 then
      p.out = {'elsewhere', 0, 0, limit}
    elseif held + other + p.want > limit then
      p.out = {'limit', held + other, 0, limit}
    else
      p.take = p.want
      p.out = {'pending', p.want, 0, limit}
    end
  end
  plan[#plan + 1] = p
end
-- a quota part over the user's limit refuses the order whatever the stock
-- (local.go: refusal): the call takes nothing, so the refusal leaves no
-- take to roll back, no redo entry (soldout.go)
for _, q in ipairs(plan) do
  if q.out[1] == 'limit' then
    for _, p in ipairs(plan) do
      if p.take then p.take, p.out = nil, {'none', 0, 0, p.out[4]} end
    end
    break
  end
end
local out, deadlineS = {}, Idl(deadline)
for _, p in ipairs(plan) do
  if p.take then
    local off, member = 0, p.id
    if p.kind == 's' then
      -- absolute values from the plan into the script call's copy of the
      -- hash (stock_set: flush writes it once; the script is atomic)
      stock_set(p.ck, p.avail, p.resv)
      off = next_offset(REDO_OFFSETS, p.xk)
      local offS = I(off)
      zadd_later(redo_seg(p.xk, off), offS, p.id)
      member = pend_pos(p.xk, offS)
      p.out[3] = off
    else
      redis.call('INCRBY', p.ck, I(p.take))
    end
    part_new(p.pk, p.ra, p.rb, p.take, off, deadlineS)
    zadd_later(PENDING, deadlineS, member)
  end
  for j = 1, 4 do out[#out + 1] = p.out[j] end
end
return out
