-- the take back (apply_takeback.go): a transfer's out and done in one
-- script, validating the counter before the first write; it leaves no
-- transfer record of the id (one found, a step 3 out's in a copy taken
-- during step 3 or a run of a release before, is dropped: the counter is
-- read instead)
local a, c, l, r, err = xfer_amounts()
if err then return err end
if r ~= 0 then return {'busy', r, 0, 0} end
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
