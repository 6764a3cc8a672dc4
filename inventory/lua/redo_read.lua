
local e = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. ARGV[4], '+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[5]))
local out = {}
for i = 1, #e, 2 do
  out[#out + 1] = redoEntry(e[i], e[i + 1])
end
return out
