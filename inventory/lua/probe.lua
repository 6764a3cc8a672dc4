
local out = {}
local inc = redis.call('HGET', KEYS[1], 'incarnation') or ''
-- every record read before anything is written: one that cannot be read
-- fails the probe (part_read: SHARDIS_CORRUPT) with nothing changed
local recs = {}
for i = 2, #KEYS do
  recs[i] = part_read(KEYS[i]) or {} -- a promised part: never inline (inline.go)
end
for i = 2, #KEYS do
  local rec = recs[i]
  local f = {rec.state, rec.token, rec.qty, rec.offset}
  local promised = ARGV[5 + i] or ''
  if f[1] == 'pending' and rec.held ~= '1' then
    rec.held = '1'
    part_put(KEYS[i], rec)
  end
  if f[1] then
    out[#out + 1] = {f[1], f[2] or '', tonumber(f[3]) or 0, tonumber(f[4]) or 0}
  elseif promised ~= '' and promised ~= inc then
    out[#out + 1] = {'lost', '', 0, 0}
  elseif ARGV[4] == 'prevent' then
    part_put(KEYS[i], {state = 'cancelled', qty = '0', order = ARGV[5], tombstone = '1', at = nowS}, tonumber(ARGV[6]))
    out[#out + 1] = {'prevented', '', 0, 0}
  else
    out[#out + 1] = {'absent', '', 0, 0}
  end
end
return out
