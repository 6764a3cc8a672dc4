-- The pending index's members (keys.go, PendingKey, holds the rule). A
-- stock part is indexed by its place in its node's redo log, the queue
-- number, ':', the offset (a few bytes: no longer than a short id, shorter
-- the longer the ids), any other part by its id; a release before indexed
-- every part by its id, and such a member stays until its part leaves the
-- index (the removals name both forms).
-- pend_pos(xk, offS): the member of the stock part at offset offS (the
-- offset as a string, I(off): the callers have it at hand, so it is not
-- formatted or looked up again) of redo queue xk.
-- (pend_pos keeps each queue's number it cut.)
local pendq = {}
local function pend_pos(xk, offS)
  local q = pendq[xk]
  if not q then
    q = string.sub(xk, #PFX_REDO + 1) .. ':'
    pendq[xk] = q
  end
  return q .. offS
end
-- pend_member(id, f): the member part id with record f (nil when gone) is
-- indexed under.
local function pend_member(id, f)
  if f and f.kind == 's' and f.redo and string.sub(f.redo, 1, #PFX_REDO) == PFX_REDO then
    local off = tonumber(f.offset)
    if off and off > 0 then return pend_pos(f.redo, I(off)) end
  end
  return id
end
-- pend_id(m): the id of the part member m stands for: m itself when it is
-- an id (ids hold '|'), else the redo log's entry at its place; nil when
-- the log has none there.
local function pend_id(m)
  if string.find(m, '|', 1, true) then return m end
  local q, off = string.match(m, '^(%d+):(%d+)$')
  if not q then return m end
  return redo_at(PFX_REDO .. q, tonumber(off))
end
-- pend_listed(xk, offS, id) reports whether part id, whose redo-log entry
-- is at offset offS (as pend_pos takes it; nil: not known) of queue xk,
-- is listed undecided on this node: the pending index holds its place or
-- its id, or the stuck index (inv:stuck, stuck.go) its id. A part whose
-- record is gone while it is listed is a pending part whose record was
-- lost (deleted, evicted, lost with the node's writes): its units are
-- reserved still and it may settle yet (a repaired record, retried),
-- never a part settled long ago whose record lived out its retention
-- (redolog.go, "What a trim removes"). A caller that takes offS from
-- anything but the entry itself checks the entry at offS names id.
local function pend_listed(xk, offS, id)
  if offS and redis.call('ZSCORE', PENDING, pend_pos(xk, offS)) then return true end
  if redis.call('ZSCORE', PENDING, id) then return true end
  return redis.call('ZSCORE', 'inv:stuck', id) ~= false
end
