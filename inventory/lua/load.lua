
local add, limit = tonumber(ARGV[4]), tonumber(ARGV[5])
if v[1] + add > 9007199254740000 or v[4] + add > 9007199254740000 then
  return redis.error_reply('SHARDIS_RANGE stock would exceed 2^53')
end
-- the redo offsets hash the takes of this stock will read: a hash table
-- (redo_pad; it stays one once it is)
redo_pad(REDO_OFFSETS)
if add > 0 then
  v[1] = redis.call('HINCRBY', KEYS[2], 'available', add)
  v[4] = redis.call('HINCRBY', KEYS[2], 'loaded', add)
end
if limit >= 0 then
  redis.call('HSET', KEYS[2], 'limit', limit, 'limit_ver', ARGV[6])
  v[5] = limit
end
return v
