
local head = tonumber(redis.call('HGET', KEYS[2], KEYS[3])) or 0
local first, err = redo_first(KEYS[2], KEYS[3])
if err then return err end
local e = redo_range(KEYS[3], tonumber(ARGV[4]), tonumber(ARGV[5]), head, first)
local out = {}
for i = 1, #e, 2 do
  out[#out + 1] = redoEntry(e[i], e[i + 1])
end
return out
