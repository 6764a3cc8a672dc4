
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
-- general one: its id, kind, want, template pieces; the user 7) with
-- plan_one, then take_stock below, without the plan's tables; any other
-- with plan_parts, then write_parts; none (the usual stage: the stock is
-- on other nodes) plans nothing
local one, pid, pwant, pa, pb, puser = false
if short1 then
  one, pid, pwant, pa, pb, puser = true, ARGV[5], Nqty(CARGV[5]), PNEW_STOCK, ARGV[6], ''
elseif np == 1 and ARGV[14] == 's' then
  one, pid, pwant, pa, pb, puser = true, ARGV[13], Nqty(ARGV[15]), ARGV[16], ARGV[17], ARGV[7]
end
local plan, avail, resv, err, refused
if one then
  avail, resv, refused = plan_one(pk, ck, xk, pwant, puser)
  if not avail then err = resv end
elseif np > 0 then
  plan, err, refused = plan_parts(KEYS, ARGV, kb + 3, ab + 13, np, ARGV[7], false)
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
  if status and not takeover then return {'existing', status, token or ''} end
  set_value(key, rec, ttl)
end
if one then
  local _, offS = take_stock(pk, ck, xk, pid, pwant, pa, pb, avail, resv,
    Idl(short1 and deadline + PART_GRACE or part_due(ARGV[6])))
  return staged_head(deadline) .. ':' .. offS
end
if np == 0 then return staged_head(deadline) end -- no part on the home
local out = {staged_head(deadline)}
for _, off in ipairs(write_parts(plan, part_due(ARGV[6]))) do
  out[#out + 1] = I(off)
end
return table.concat(out, ':')
