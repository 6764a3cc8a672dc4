
local ms = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
local out = {}
for _, m in ipairs(ms) do
  -- id: the part the member stands for; nil when it names no part (a
  -- place whose redo-log entry is gone, pending_index.lua)
  local id = pend_id(m)
  local f, problem = nil, nil
  if id then f, problem = part_try(partPrefix .. id) end
  if problem then
    -- a record it cannot read: reported with why, so the caller sets the
    -- part aside instead of this listing failing for every part behind it
    f = {}
  elseif (not f or f.tombstone == '1') and id and string.find(id, '|', 1, true) then
    -- a part's record (or, for an inline part, its order record) gone
    -- while the index lists it, or a tombstone written over it (by a
    -- cancel that did not know its place: pend_lost): what it holds is
    -- reserved still, and only a repair can say how much; set aside, not
    -- dropped
    f, problem = {}, 'its record (or, held inline, its order record) is gone, unreadable or a tombstone while the pending index lists it'
  elseif not f then
    -- a member that names no part: reported under the member itself,
    -- which pending_adjust's drop removes (it cannot rebuild it)
    id, f = m, {}
  end
  -- stuck_since: the part was set aside before (pending_adjust.lua),
  -- which the expire op's reading of a missing order record needs
  out[#out + 1] = {id, f.order or '', f.token or '', f.state or '', tonumber(f.deadline) or 0, m, problem or '',
    tonumber(f.stuck_since) or 0}
end
return out
