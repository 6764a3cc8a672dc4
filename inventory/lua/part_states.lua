
local out = {}
for i = 2, #KEYS do
  local f = part_get(KEYS[i]) or {}
  out[#out + 1] = {f.state or '', tonumber(f.settled_at) or 0}
end
return {redis.call('HGET', KEYS[1], 'incarnation') or '', out}
