
local out = {}
for i = 2, #KEYS do
  -- a record that cannot be read is reported with why (its state
  -- unknown), never as no record: the other parts are read as usual
  local f, why = part_try(KEYS[i])
  f = f or {}
  out[#out + 1] = {f.state or '', tonumber(f.settled_at) or 0, why or ''}
end
return {redis.call('HGET', KEYS[1], 'incarnation') or '', out}
