-- the stamp's seq: advanced once when a call wrote or a carried commit
-- changed its record, else the one the stamp check read (no tonumber of
-- it when the HINCRBY answers it)
local seq
if wrote + committed > 0 then
  seq = redis.call('HINCRBY', KEYS[1], 'seq', '1')
else
  seq = tonumber(meta[3]) or 0
end
return {seq, out, carried}
