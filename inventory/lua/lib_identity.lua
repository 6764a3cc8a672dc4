local name = redis.call('HGET', KEYS[1], 'name')
if name ~= ARGV[1] then
  return redis.error_reply('SHARDIS_IDENTITY node stamp is ' .. tostring(name) .. ', expected ' .. ARGV[1])
end
