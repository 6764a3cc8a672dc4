-- Taking a set of parts on one node all or nothing: the reserve scripts
-- that write an order's parts in the same step as its record (localScript,
-- stageTakeScript) share these; local.go holds the path's rule.
--
-- plan_parts(K, A, kb, ab, np, user, inline) reads the np parts
-- whose keys start at K[kb] (part key, counter key, and redo queue (kind
-- s) or stock hash holding the limit (kind q), per part) and whose
-- arguments start at A[ab] (appendPartPieces: id, kind, want and the two
-- pieces of the part record's template, per part; when inline, a stock
-- part has no record and so no pieces); K and A are the script's KEYS and
-- ARGV (a group call's body passes its positions with its kb and ab
-- added: luaflat.go). It returns the
-- plan, or nil when some part cannot be met in full (it exists already,
-- stock is short, a limited SKU has no user, a quota would be exceeded),
-- or nil and an error reply for a corrupt value (a counter, or a queue's
-- last offset in the redo offsets hash). When a stock part is short or a
-- limited SKU has no user it returns nil, nil, true: a refusal that a read
-- of the SKU's other nodes may settle without a write (soldout.go). When a
-- quota part is over the limit it returns nil, nil, false, {part's
-- position, held, limit} (localLimit: the caller weighs what the user
-- holds). It writes nothing. For a stock part it records the counter's
-- available and reserved once the part is taken (p.avail, p.resv, after
-- the order's earlier parts on the same counter).
--
-- write_parts(plan, pdl, inline) takes every planned part (pending until
-- pdl: the record the caller encoded, rectemplate.go; none for a stock
-- part when inline, take_stock) and returns the redo offset of each (0
-- for quota parts). A stock part is taken by take_stock(pk, ck, xk, id,
-- want, ra, rb, avail, resv, pdlS), which writes the counter's planned
-- values (available and reserved once taken) rather than two increments:
-- the script is atomic, so nothing changed them since the plan read them;
-- and the part's record, unless pk is nil (inline: the caller's order
-- record holds the part, inline.go). It returns the part's redo offset,
-- and the offset as a string (I(off), what its caller's reply and record
-- hold). The parts go into the node's pending index and redo log
-- (PENDING, REDO_OFFSETS).
--
-- An inline stock part's key is not read: it cannot exist yet. Its id
-- names the attempt's token (stockPartID), which is new for each attempt
-- (newToken) and sent in one script call only (one try: node.go never
-- replays a command, and a Faults hook sends a call at most once), and
-- its key is written only from the record this call writes (inline.go:
-- a decision or a move writes it first). Every other part's key is
-- checked (EXISTS): there a record may be a retry's fence.
--
-- The one-part paths (an order or attempt of one stock part on the node:
-- local.lua, stage_take.lua, reserve.lua) write plan_parts' and
-- take_stock's steps for that one part out, on the same copies
-- (prelude.lua), in the same order of checks, instead of calling them
-- and their helpers: a Lua call costs the node about 600 instructions,
-- and they are every minted order's, every take's and every 3-item
-- stage's path (callgrind, in rounds: 3,600 node instructions fewer per
-- minted order, 3,900 per take, 5,600 per take of a cold part;
-- TestLocalScriptInstructions, TestTakeScriptInstructions,
-- TestStageScriptInstructions). A part with a key of its own (reserve.lua,
-- stage_take.lua) is set only if its key is missing (SETNX) before any
-- other write of the call, and its key is read only when that fails or a
-- check does, so a part whose key is there answers as the plan does.
-- TestTakeOneAsPlan holds each against plan_parts then write_parts on a
-- node, and TestTakeAtCopiesMatch their copies of take_at's steps against
-- take_at. An order of one item without a user id is one stock part; its
-- tables were a few µs of an order's script time (TestLocalScriptCost).
local function plan_parts(K, A, kb, ab, np, user, inline)
  local avail, resv, held, plan, nq = {}, {}, {}, {}, {}
  local a = ab
  for i = 0, np - 1 do
    local p = {pk = K[kb + i * 3], ck = K[kb + 1 + i * 3], xk = K[kb + 2 + i * 3], id = A[a], kind = A[a + 1],
               want = Nqty(A[a + 2])}
    if inline and p.kind == 's' then
      a = a + 3
    else
      p.ra, p.rb, a = A[a + 3], A[a + 4], a + 5
    end
    if not (inline and p.kind == 's') and redis.call('EXISTS', p.pk) == 1 then return nil end
    local err
    if p.kind == 's' then
      if avail[p.ck] == nil then
        avail[p.ck], err = stock_int(p.ck, 1, ' available')
        if err then return nil, err end
        resv[p.ck], err = stock_int(p.ck, 3, ' reserved')
        if err then return nil, err end
      end
      local _, oerr = offsets_ok(REDO_OFFSETS, p.xk)
      if oerr then return nil, oerr end
      nq[p.xk] = (nq[p.xk] or 0) + 1
      redo_ok(REDO_OFFSETS, p.xk, nq[p.xk]) -- its redo segment must be a sorted set
      local limit
      limit, err = stock_int(p.ck, 2, ' limit')
      if err then return nil, err end
      if avail[p.ck] < p.want or (limit > 0 and user == '') then return nil, nil, true end
      avail[p.ck], resv[p.ck] = avail[p.ck] - p.want, resv[p.ck] + p.want
      p.avail, p.resv = avail[p.ck], resv[p.ck] -- the hash's values once this part is taken
    else
      local limit
      limit, err = int(redis.call('HGET', p.xk, 'limit'), p.xk, ' limit')
      if err then return nil, err end
      if held[p.ck] == nil then
        held[p.ck], err = int(redis.call('GET', p.ck), p.ck)
        if err then return nil, err end
      end
      -- over the limit: the caller weighs what the user holds (limitMayBeOwn)
      if limit > 0 and held[p.ck] + p.want > limit then return nil, nil, false, {i + 1, held[p.ck], limit} end
      held[p.ck] = held[p.ck] + p.want
    end
    plan[#plan + 1] = p
  end
  return plan
end
local function take_stock(pk, ck, xk, id, want, ra, rb, avail, resv, pdlS)
  -- absolute values from the plan into the script call's copy of the
  -- hash (take_at: flush writes it once; the script is atomic), at the
  -- offset next_offset would hand out (next_offset's, inline)
  local off = offtab[REDO_OFFSETS][xk][1] + 1
  local offS = I(off)
  take_at(ck, xk, id, avail, resv, off, offS, redo_seg(xk, off), pdlS, pend_pos(xk, offS))
  -- the plan found no key at pk (plan_parts: EXISTS), so SETNX
  -- sets it, and its integer reply costs the node no status table; were
  -- the key there after all, it is written over, as before
  if pk and not part_new(pk, ra, rb, want, off, pdlS, true, offS) then
    part_new(pk, ra, rb, want, off, pdlS, false, offS)
  end
  return off, offS
end
local function write_parts(plan, pdl, inline)
  local offs, pdlS = {}, Idl(pdl)
  for _, p in ipairs(plan) do
    local off = 0
    if p.kind == 's' then
      off = take_stock(not inline and p.pk or nil, p.ck, p.xk, p.id, p.want, p.ra, p.rb, p.avail, p.resv, pdlS)
    else
      redis.call('INCRBY', p.ck, I(p.want))
      part_new(p.pk, p.ra, p.rb, p.want, 0, pdlS)
      zadd_later(PENDING, pdlS, p.id)
    end
    offs[#offs + 1] = off
  end
  return offs
end
-- local_times(ttlS): the local reserve's times for an order of TTL ttlS
-- (ms, as sent): {its deadline (now + the TTL), its part's deadline as a
-- string (Idl(deadline + PART_GRACE)), its reply's head
-- (reserved_head(deadline))}, kept for the last ttlS: one Lua call per
-- order where there were three (the orders of a script call mostly share
-- their TTL). It reads now, so it is made afresh per script call.
local local_times = memo(function(ttlS)
  local d = now + Nttl(ttlS)
  return {d, Idl(d + PART_GRACE), reserved_head(d)}
end)
