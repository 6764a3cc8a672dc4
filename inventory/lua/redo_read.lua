
-- a head that is not an integer is corrupt (as redo_batch.lua reads it),
-- not an empty queue
local head, err = int(redis.call('HGET', KEYS[2], KEYS[3]), KEYS[2] .. ' ' .. KEYS[3])
if err then return err end
local first
first, err = redo_first(KEYS[2], KEYS[3])
if err then return err end
local e = redo_range(KEYS[3], tonumber(ARGV[4]), tonumber(ARGV[5]), head, first)
local out = {}
for i = 1, #e, 2 do
  out[#out + 1] = redoEntry(e[i], e[i + 1])
end
return out
