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
-- pend_lost(f, xk, offS, id) reports whether record f of part id (nil:
-- gone) stands for a pending part whose record was lost: f gone, or a
-- tombstone, while the node lists the part (pend_listed, its arguments
-- as there). A tombstone is written only where the record is gone and
-- the writer saw no listing (settle.lua, probe.lua), and a take never
-- lands where a record is (its SETNX): so a tombstone of a part the node
-- lists was written over a lost record by a writer that did not know the
-- part's place (a cancel or an abort of a one-round order before its
-- commit, whose record names no place yet: carry.go), and the part's
-- units are reserved still. It still fences the take it would have
-- fenced; only a reader that meets it where the part is listed reads it
-- as the lost record it stands for.
local function pend_lost(f, xk, offS, id)
  if f and f.tombstone ~= '1' then return false end
  return pend_listed(xk, offS, id)
end
