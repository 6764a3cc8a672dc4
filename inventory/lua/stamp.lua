
local meta = redis.call('HMGET', KEYS[1], 'name', 'epoch', 'seq')
if meta[1] ~= ARGV[1] then
  return redis.error_reply('SHARDIS_IDENTITY node stamp is ' .. tostring(meta[1]) .. ', expected ' .. ARGV[1])
end
if (meta[2] or '') ~= ARGV[2] then
  return redis.error_reply('SHARDIS_EPOCH node ' .. ARGV[1] .. ' is at topology ' .. tostring(meta[2] or 'none') ..
    ', the caller at ' .. ARGV[2])
end
local partPrefix = ARGV[3]
