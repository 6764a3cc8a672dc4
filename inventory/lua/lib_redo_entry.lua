
-- redoEntry(id, off, xk) is the redo entry at offset off of queue xk
-- naming part id: {offset, part id, order, sku, qty, state, at,
-- settled_at, counter key}, read from the part's record, state 'expired'
-- when the record is gone. A record that is there but cannot be read
-- (part_try: a value of another type, a state code that is none) is no
-- entry: nil, the record's key and why, which the caller reports (never
-- read as gone: expired); and so is a record gone while the part is
-- listed undecided (pend_listed: the pending index holds its place or
-- id, or the stuck index its id): a pending part whose record was lost,
-- its units reserved still, which may settle yet once its record is
-- repaired (redolog.go, "What a trim removes"): read as expired, a
-- consumer would land a final state it never revisits; and so is a
-- tombstone of such a part (pend_lost), which a consumer would land as
-- cancelled with no units.
local function redoEntry(id, off, xk)
  local key = partPrefix .. id
  local f, why = part_try(key)
  if why then return nil, key, why end
  if pend_lost(f, xk, I(tonumber(off)), id) then
    return nil, key, 'gone (or a tombstone written over it) while the part is listed pending or set aside (a pending part whose record ' ..
      'was lost: deleted, evicted, or lost with the node\'s writes; its units are reserved still): not expired, undecided ' ..
      'until the record is repaired'
  end
  f = f or {}
  return {tonumber(off), id, f.order or '', f.sku or '', tonumber(f.qty) or 0, f.state or 'expired', tonumber(f.at) or 0,
    tonumber(f.settled_at) or 0, f.counter or ''}
end
