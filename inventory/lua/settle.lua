
local action = ARGV[4]
if action ~= 'confirm' and action ~= 'cancel' and action ~= 'abort' then
  -- before any write: any other word was once run as a cancel
  return redis.error_reply('SHARDIS_BADOP settle action ' .. tostring(action) .. ' is not confirm, cancel or abort')
end
local target = action == 'confirm' and 'confirmed' or 'cancelled'
local retention = tonumber(ARGV[5])
local out = {}
local todo = {}
-- seen[pk] is the first answer for part key pk and whether it queued a
-- write: every record is read before any is written, so a part named
-- twice would read pending twice and settle twice (its units moved
-- twice). A repeat answers "already" when the first settled it (or wrote
-- its tombstone), else as the first, and queues nothing.
local seen = {}
-- claimed: the units the parts checked so far take from each counter
-- (stock_settle_check): parts sharing a counter are checked together
local claimed = {}
-- places: whether the call passed, after its part ids, each part's
-- pending-index member ("" unknown; a cancel or an abort's), part KEYS[i]'s
-- at ARGV[i + 4 + nparts] (read only then: in a group, past the call's own
-- arguments are the next call's, luaflat.go)
local nparts = #KEYS - 2
local places = #ARGV >= 6 + 2 * nparts
redis.call('ZCARD', KEYS[2]) -- fails now, before any write, if the index is not a sorted set
for i = 3, #KEYS do
  local pk = KEYS[i]
  local first = seen[pk]
  if first then
    out[#out + 1] = first.queued and 'already' or first.word
  else
    local queued = #todo
    local rec = part_get(pk) or {}
    local f = {rec.state, rec.kind, rec.qty, rec.counter, rec.held}
    local st = f[1]
    -- lost: a record gone or a tombstone, of a part this node lists
    -- (pend_listed: by its place, which the caller passes when it knows
    -- it, the entry there checked to name the part, or by its id); only
    -- a cancel or an abort looks (a confirm writes no tombstone)
    local lost = false
    if (not st or rec.tombstone == '1') and action ~= 'confirm' then
      local id, m = ARGV[i + 4], places and ARGV[i + 4 + nparts] or ''
      lost = (m ~= '' and pend_id(m) == id and redis.call('ZSCORE', PENDING, m)) or pend_listed(nil, nil, id)
    end
    if not st and action == 'confirm' then
      out[#out + 1] = 'missing'
    elseif lost then
      -- a part this node still lists was taken here and its record lost
      -- since: its units are reserved still, and a tombstone (not
      -- pending) would make the expiry drop it and leave them so for
      -- good. It is left as it is, to be set aside once due. So is a
      -- tombstone of such a part: written over its lost record by a
      -- cancel that did not know its place (pend_lost)
      out[#out + 1] = 'lost'
    elseif not st then
      -- a tombstone fences a take that has not landed. A part listed by
      -- its place alone, the place not given (a one-round order's before
      -- its commit: carry.go), gets one too: every reader that meets it
      -- listed reads it as the lost record it stands for (pend_lost)
      out[#out + 1] = 'tombstoned'
      todo[#todo + 1] = {pk = pk, tomb = true}
    elseif st == 'pending' and action == 'abort' and f[5] then
      out[#out + 1] = 'held'
    elseif st == 'pending' then
      local q, err = int(f[3], pk .. ' qty')
      if err then return err end
      if f[2] == 's' then
        local serr = stock_settle_check(f[4], pk, q, action == 'confirm', 'SHARDIS_CORRUPT', claimed)
        if serr then return serr end
      elseif f[2] ~= 'q' then
        -- no kind (a record written by hand, or garbled) is no quota
        -- part: settled as one, a stock part's units would stay reserved
        return part_corrupt(pk, 'kind "' .. tostring(f[2] or '') .. '" of a pending part is neither s (stock) nor q (quota)')
      elseif action ~= 'confirm' then
        local qerr = quota_settle_check(f[4], pk, q, 'SHARDIS_CORRUPT', claimed)
        if qerr then return qerr end
      end
      todo[#todo + 1] = {pk = pk, id = ARGV[i + 4], q = q, rec = rec}
      out[#out + 1] = 'done'
    elseif st == target then
      out[#out + 1] = 'already'
    else
      out[#out + 1] = 'conflict:' .. st
    end
    seen[pk] = {word = out[#out], queued = #todo > queued}
  end
end
for _, p in ipairs(todo) do
  if p.tomb then
    part_put(p.pk, {state = 'cancelled', qty = '0', order = ARGV[6], tombstone = '1', at = nowS}, retention)
  else
    part_settle(p.pk, p.id, p.rec, p.q, action == 'confirm', retention)
  end
end
return out
