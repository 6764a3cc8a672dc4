
if redis.call('EXISTS', KEYS[2]) == 1 then return {0, 0} end
local limit, count, truncated = tonumber(ARGV[5]), 0, 0
local idx = {KEYS[4]}
if ARGV[4] == '1' then idx[2] = KEYS[3] end
for _, key in ipairs(idx) do
  local ids = redis.call('ZRANGE', key, 0, limit - 1)
  if #ids == limit and redis.call('ZCARD', key) > limit then truncated = 1 end
  for _, id in ipairs(ids) do
    if key == KEYS[3] then id = pend_id(id) or id end -- the pending index's member (pending_index.lua)
    -- a record it cannot read is not counted (the count is a lower
    -- bound, as when an index holds more than it reads)
    local f = part_try(partPrefix .. id)
    if f and f.counter == KEYS[2] and f.state == 'pending' then count = count + 1 end
  end
end
return {count, truncated}
