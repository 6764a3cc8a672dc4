local epoch = redis.call('HGET', KEYS[1], 'epoch')
if (epoch or '') ~= ARGV[2] then
  return redis.error_reply('SHARDIS_EPOCH node ' .. ARGV[1] .. ' is at topology ' .. tostring(epoch or 'none') ..
    ', the caller at ' .. ARGV[2])
end
local nr = tonumber(ARGV[3])
local out, o = {}, 0
for i = 2, nr + 1 do
  local status, moved = order_head(KEYS[i])
  o = o + 1
  if status and not moved then out[o] = status else out[o] = '' end
end
local nq = tonumber(ARGV[4])
for i = nr + 2, #KEYS - nq do
  local s = redis.call('HMGET', KEYS[i], 'available', 'reserved', 'limit', 'loaded')
  out[o + 1], out[o + 2], out[o + 3] = s[1] or 0, s[2] or 0, s[3] or 0
  if s[4] then out[o + 4] = 1 else out[o + 4] = 0 end
  o = o + 4
end
for i = #KEYS - nq + 1, #KEYS do
  local v = redis.pcall('GET', KEYS[i])
  if type(v) == 'table' then v = 'WRONGTYPE' end -- not a counter: the caller's int check names it
  o = o + 1
  out[o] = v or 0
end
return out
