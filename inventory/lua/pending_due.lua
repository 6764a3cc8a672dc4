
local ms = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
local out = {}
for _, m in ipairs(ms) do
  -- a member with no entry at its place names no part: it is reported
  -- as one whose record is gone, under the member itself, which
  -- pending_adjust's drop removes (pending_index.lua)
  local id = pend_id(m) or m
  local f = part_get(partPrefix .. id)
  -- a place whose part's record is gone: reported under the member too,
  -- so the drop removes the member itself (it cannot rebuild it)
  if not f then id, f = m, {} end
  out[#out + 1] = {id, f.order or '', f.token or '', f.state or '', tonumber(f.deadline) or 0}
end
return out
