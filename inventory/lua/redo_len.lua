
-- the entries still in the queue key itself, then the segments': one
-- gap-free run from the lowest segment's first entry to the head
local total = 0
for k = 3, #KEYS do
  local xk = KEYS[k]
  total = total + redis.call('ZCARD', xk)
  local head = tonumber(redis.call('HGET', KEYS[2], xk)) or 0
  local s = redo_low(xk, 0, head)
  if s then
    local first = redis.call('ZRANGE', redo_segkey(xk, s), 0, 0, 'WITHSCORES')
    total = total + head - tonumber(first[2]) + 1
  end
end
return total
