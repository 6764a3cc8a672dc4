
-- the settled log after a cursor (settledlog.go: ReadSettled); the log's
-- counts come from XINFO STREAM's flat name, value reply
local inc = redis.call('HGET', KEYS[1], 'incarnation') or ''
if redis.call('EXISTS', KEYS[2]) == 0 then return {inc, 0, 0, {}} end
local info, added, length = redis.call('XINFO', 'STREAM', KEYS[2]), 0, 0
for i = 1, #info - 1, 2 do
  if info[i] == 'entries-added' then
    added = info[i + 1]
  elseif info[i] == 'length' then
    length = info[i + 1]
  end
end
local out = {}
for _, e in ipairs(redis.call('XRANGE', KEYS[2], '(' .. ARGV[4], '+', 'COUNT', ARGV[5])) do
  out[#out + 1] = e[1]
  out[#out + 1] = e[2][2]
end
return {inc, added, length, out}
