
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
local out = {}
for _, id in ipairs(ids) do
  local f = part_get(partPrefix .. id) or {}
  out[#out + 1] = {id, f.order or '', f.token or '', f.state or '', tonumber(f.deadline) or 0}
end
return out
