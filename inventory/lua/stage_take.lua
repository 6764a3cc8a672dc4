
local key = KEYS[2]
local np = (#KEYS - 2) / 3 -- the home's parts
-- the record's fields: ttl, retention, the record's pieces, the mutation
-- (ARGV 8 to 12 in the general layout)
local ttlS, retS, ra, rb, mut
-- a stage of no part on the home (the usual stage: the stock is on other
-- nodes) comes in a short layout (stageTakeCall): ARGV 4 the record's
-- first piece; a context (group.go, "Contexts"), which the general layout
-- never has: CARGV 1 ttl, 2 retention, 3 the record's second piece, 4 the
-- mutation. It leaves out the order id, the part deadline and the user,
-- which only parts read, and the token, which the record's first piece
-- holds (stage_tok).
-- A stage of one stock part on the home and no user comes in a short
-- layout too: KEYS 3 its part key, ARGV 5 its id, 6 its record
-- template's second piece (the first a pending stock part's, PNEW_STOCK);
-- CKEYS 1 its counter, 2 its redo queue, CARGV 5 its want; its deadline
-- is the order's, plus the grace (what the general layout's part
-- deadline says for a stage with no fault hook's mutation:
-- stageDeadline)
local short, short1 = #CARGV > 0, false
local pk, ck, xk -- the first part's keys, when the home has a part
if short then
  ttlS, retS, ra, rb, mut = CARGV[1], CARGV[2], ARGV[4], CARGV[3], CARGV[4]
  if #CARGV == 5 then short1, np, pk, ck, xk = true, 1, KEYS[3], CKEYS[1], CKEYS[2] end
else
  ttlS, retS, ra, rb, mut = ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12]
  if np > 0 then pk, ck, xk = KEYS[3], KEYS[4], KEYS[5] end
end
-- the pending index must be a sorted set when a part goes into it; like
-- the plan's checks, this one may refuse a call whose order has a record
-- to keep (nothing is written either way). zset_ok's test inline, as the
-- other reserve scripts have it: a Lua call costs the node about 600
-- instructions.
if np > 0 and not zchecked[PENDING] then zset_ok(PENDING) end
local deadline = now + Nttl(ttlS)
-- plan the home's parts (nothing written yet): one stock part (its keys
-- pk, ck, xk; its arguments as above in the short layout, from 13 in the
-- general one: its id, kind, want, template pieces; the user 7) by
-- plan_parts' and take_stock's steps for it, written out below, without
-- the plan's tables; any other with plan_parts, then write_parts; none
-- (the usual stage: the stock is on other nodes) plans nothing
local one, pid, pwant, pa, pb, puser = false
if short1 then
  one, pid, pwant, pa, pb, puser = true, ARGV[5], Nqty(CARGV[5]), PNEW_STOCK, ARGV[6], ''
elseif np == 1 and ARGV[14] == 's' then
  one, pid, pwant, pa, pb, puser = true, ARGV[13], Nqty(ARGV[15]), ARGV[16], ARGV[17], ARGV[7]
end
local plan, avail, resv, err
-- the one part's take, once planned: its offset (and as a string), its
-- redo segment, its deadline as a string, the copies of its counter and
-- its queue's offsets
local off, offS, seg, pdlS, v, o
if one then
  -- plan_parts' steps for one stock part (and the helpers' it calls:
  -- stock_int, offsets_ok, redo_ok), written out on the copies the
  -- helpers keep (prelude.lua: stocks, offtab, zchecked; the segment's
  -- key from redo_seg), as local.lua's and reserve.lua's one part have
  -- them: a Lua call costs the node about 600 instructions (take_whole.lua).
  -- The checks in the plan's order: the counter's available and reserved,
  -- the queue's offsets, its next offset's segment, the counter's limit.
  -- The plan reads first whether the part's key is there (EXISTS: about
  -- 4,400 instructions); here the part is set only if its key is missing
  -- (SETNX) before anything else is written, and only a check that fails
  -- reads it, so that a part whose key is there answers as the plan's
  -- did: nothing written, the record's head, else 'short'. (Only a
  -- counter that is not a hash, which the plan never read then, raises
  -- instead.)
  v, o = stocks[ck], offtab[REDO_OFFSETS]
  o = o and o[xk]
  local limit
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
  local raised -- err is the segment's, which the plan raises
  if not err then
    off = o[1] + 1 -- the offset take_stock hands out
    seg = redo_seg(xk, off)
    if not zchecked[seg] then
      -- redo_ok's check
      local r = redis.pcall('ZCARD', seg)
      if type(r) == 'table' and r.err then
        err, raised = r, true
      else
        zchecked[seg] = true
      end
    end
    if not (err or limit) then limit, err = stock_int(ck, 2, ' limit') end
  end
  if err then
    -- a failed check answers as the plan's does (a raised error at once:
    -- nothing written, no record read), unless the part's key is there
    -- (then short, as below)
    if redis.call('EXISTS', pk) == 1 then
      err = nil
    elseif raised then
      return err
    end
    avail = nil
  elseif avail >= pwant and (limit <= 0 or puser ~= '') then
    offS, pdlS = I(off), Idl(short1 and deadline + PART_GRACE or part_due(ARGV[6]))
    -- part_new's record, set only if its key is missing: a key that is
    -- there is short, as the plan's EXISTS answers it
    if redis.call('SETNX', pk, pa .. Iq(pwant) .. '\031' .. offS .. pb .. pdlS .. '\031' .. nowS) == 1 then
      avail, resv = avail - pwant, resv + pwant
    else
      avail = nil
    end
  else
    avail = nil
  end
elseif np > 0 then
  plan, err = plan_parts(KEYS, ARGV, kb + 3, ab + 13, np, ARGV[7], false)
end
if not (avail or plan or np == 0) then
  -- a record to keep answers before the refusal, as a stage that read
  -- it first would (the mutation asks for the fault hook's test-only
  -- takeover of a failed record of another token: faults.go)
  local status, token, takeover = order_stage_head(key, mut == 'stage-takeover', stage_tok(short, ra, ARGV[5]))
  if status and not takeover then return {'existing', status, token or ''} end
  return err or {'short'}
end
-- the record the caller encoded (rectemplate.go), the node's clock as its
-- created field, set only if its key is missing, so the usual stage (no
-- record) does not read it first; a key that is there reads the head and
-- answers as above, or is replaced (moved, or taken over). The script is
-- atomic, so no one sees these steps in another order.
-- (SET NX with GET answers nil when it set the key, where SET NX alone
-- answers a status table; the old value, or an error for a key that is
-- not a string, when it did not: both take the way below)
local rec, ttl = ra .. nowS .. rb, Nret(retS)
if not (ttl and ttl > 0 and redis.pcall('SET', key, rec, 'NX', 'EX', retS, 'GET') == false) then
  local status, token, takeover = order_stage_head(key, mut == 'stage-takeover', stage_tok(short, ra, ARGV[5]))
  if status and not takeover then
    -- a record to keep: the one part's record, set above, goes again
    -- (its key was missing), so the stage leaves nothing
    if one then redis.call('DEL', pk) end
    return {'existing', status, token or ''}
  end
  set_value(key, rec, ttl)
end
if one then
  -- take_at's deferred writes (pend_pos's member), its arguments named as
  -- there: the copies' new values, the two queues' entries
  local pq = pendq[xk]
  if not pq then
    pq = string.sub(xk, #PFX_REDO + 1) .. ':'
    pendq[xk] = pq
  end
  local id, member = pid, pq .. offS
  o[1] = off
  if not o[2] then offsets_dirty(o) end
  v[4], v[6] = avail, resv
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
  return staged_head(deadline) .. ':' .. offS
end
if np == 0 then return staged_head(deadline) end -- no part on the home
local out = {staged_head(deadline)}
for _, off in ipairs(write_parts(plan, part_due(ARGV[6]))) do
  out[#out + 1] = I(off)
end
return table.concat(out, ':')
