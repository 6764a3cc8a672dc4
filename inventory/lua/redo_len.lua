
-- the entries still in the queue key itself, then the segments': one
-- gap-free run from the lowest segment's first entry to the head
local total = 0
for k = 3, #KEYS do
  local xk = KEYS[k]
  total = total + redis.call('ZCARD', xk)
  -- a head that is not an integer is corrupt (as redo_read.lua reads
  -- it), not an empty queue
  local head, err = int(redis.call('HGET', KEYS[2], xk), KEYS[2] .. ' ' .. xk)
  if err then return err end
  local first
  first, err = redo_first(KEYS[2], xk)
  if err then return err end
  for _, g in ipairs(redo_gens(head, first)) do
    local s = redo_low(xk, g, 0)
    if s then
      local low = redis.call('ZRANGE', g[1](xk, s), 0, 0, 'WITHSCORES')
      total = total + head - tonumber(low[2]) + 1
      break
    end
  end
end
return total
