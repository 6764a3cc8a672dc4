-- the node's incarnation, read with the entries: the offsets are its
-- (ReadRedoPage)
local inc = redis.call('HGET', KEYS[1], 'incarnation') or ''
-- a head that is not an integer is corrupt (as redo_batch.lua reads it),
-- not an empty queue
local head, err = int(redis.call('HGET', KEYS[2], KEYS[3]), KEYS[2] .. ' ' .. KEYS[3])
if err then return err end
local first
first, err = redo_first(KEYS[2], KEYS[3])
if err then return err end
local after, pid = tonumber(ARGV[4]), ARGV[6] or ''
-- the acknowledged offset at the node's incarnation, as redo_batch.lua
-- reads it (not an integer: corrupt)
local acked
acked, err = int(redis.call('HGET', KEYS[4], KEYS[3]), KEYS[4] .. ' ' .. KEYS[3])
if err then return err end
if not redo_acks_current(KEYS[4], KEYS[1]) then acked = 0 end
-- past the head, or the queue no longer holds the reader's part at after
-- (redo_holds): the queue went back under the reader (redo_batch.lua's
-- rewound, the same rule)
if after > head or not redo_holds(KEYS[3], after, pid, acked) then return {inc, head, 1, {}, 0} end
local e = redo_range(KEYS[3], after, tonumber(ARGV[5]), head, first)
local out = {}
for i = 1, #e, 2 do
  local entry, pk, why = redoEntry(e[i], e[i + 1], KEYS[3])
  -- a part record that cannot be read, or is gone while its part is
  -- listed undecided (redoEntry): the read fails naming it (and the
  -- entry), never an entry read as expired, nor a WRONGTYPE naming nothing
  if not entry then
    return redis.error_reply('SHARDIS_CORRUPT ' .. KEYS[3] .. ' offset ' .. e[i + 1] .. ': part ' .. e[i] ..
      ': its record ' .. pk .. ' cannot be read: ' .. why)
  end
  out[#out + 1] = entry
end
-- the offsets past after with no entry left (trimmed), as redo_batch.lua
-- counts them
local trimmed = 0
if head > after then
  if #e > 0 then trimmed = tonumber(e[2]) - after - 1 else trimmed = head - after end
end
return {inc, head, 0, out, trimmed}
