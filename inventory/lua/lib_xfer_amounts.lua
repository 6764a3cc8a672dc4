if ARGV[4] ~= 'quota' and ARGV[4] ~= 'stock' then
  return redis.error_reply('SHARDIS_BADOP transfer kind ' .. tostring(ARGV[4]))
end
-- xfer_amounts reads the counter KEYS[2] of the transfer's kind ARGV[4]
-- (xfer_out.lua, xfer_take_back.lua): its available units (a quota
-- counter's count), confirmed, loaded and reserved units (0 for a quota
-- counter), or as a fifth value the error naming a field that is not an
-- integer (nothing written)
local function xfer_amounts()
  if ARGV[4] == 'quota' then
    local a, err = int(redis.call('GET', KEYS[2]), KEYS[2])
    return a, 0, 0, 0, err
  end
  local f = redis.call('HMGET', KEYS[2], 'available', 'confirmed', 'loaded', 'reserved')
  local v = {}
  for i, what in ipairs({'available', 'confirmed', 'loaded', 'reserved'}) do
    local n, err = int(f[i], KEYS[2] .. ' ' .. what)
    if err then return 0, 0, 0, 0, err end
    v[i] = n
  end
  return v[1], v[2], v[3], v[4]
end
