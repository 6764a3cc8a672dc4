if ARGV[4] ~= 'quota' and ARGV[4] ~= 'stock' then
  return redis.error_reply('SHARDIS_BADOP transfer kind ' .. tostring(ARGV[4]))
end
-- the take back (apply_takeback.go): a transfer's out and done in one
-- script, validating the counter before the first write; it leaves no
-- transfer record of the id (one found, a step 3 out's in a copy taken
-- during step 3 or a run of a release before, is dropped: the counter is
-- read instead)
local a, c, l = 0, 0, 0
local err
if ARGV[4] == 'quota' then
  a, err = int(redis.call('GET', KEYS[2]), KEYS[2])
  if err then return err end
else
  local f = redis.call('HMGET', KEYS[2], 'available', 'confirmed', 'loaded', 'reserved')
  local r
  a, err = int(f[1], KEYS[2] .. ' available') if err then return err end
  c, err = int(f[2], KEYS[2] .. ' confirmed') if err then return err end
  l, err = int(f[3], KEYS[2] .. ' loaded') if err then return err end
  r, err = int(f[4], KEYS[2] .. ' reserved') if err then return err end
  if r ~= 0 then return {'busy', r, 0, 0} end
end
redis.call('DEL', KEYS[3])
if a == 0 and c == 0 and l == 0 then return {'none', 0, 0, 0} end
if ARGV[4] == 'quota' then
  redis.call('DEL', KEYS[2])
else
  redis.call('HINCRBY', KEYS[2], 'available', I(-a))
  redis.call('HINCRBY', KEYS[2], 'confirmed', I(-c))
  redis.call('HINCRBY', KEYS[2], 'loaded', I(-l))
end
return {'taken', a, c, l}
