
local function redoEntry(id, off)
  local f = part_get(partPrefix .. id) or {}
  return {tonumber(off), id, f.order or '', f.sku or '', tonumber(f.qty) or 0, f.state or 'expired', tonumber(f.at) or 0,
    tonumber(f.settled_at) or 0, f.counter or ''}
end
