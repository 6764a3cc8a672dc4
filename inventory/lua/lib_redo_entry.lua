
-- redoEntry(id, off) is the redo entry at offset off naming part id:
-- {offset, part id, order, sku, qty, state, at, settled_at, counter key},
-- read from the part's record, state 'expired' when the record is gone.
-- A record that is there but cannot be read (part_try: a value of another
-- type, a state code that is none) is no entry: nil, the record's key and
-- why, which the caller reports (never read as gone: expired).
local function redoEntry(id, off)
  local key = partPrefix .. id
  local f, why = part_try(key)
  if why then return nil, key, why end
  f = f or {}
  return {tonumber(off), id, f.order or '', f.sku or '', tonumber(f.qty) or 0, f.state or 'expired', tonumber(f.at) or 0,
    tonumber(f.settled_at) or 0, f.counter or ''}
end
