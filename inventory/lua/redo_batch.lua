
local st = redis.call('HMGET', KEYS[1], 'incarnation', 'gen', 'data_of')
local inc, gen, data_of = st[1] or '', tonumber(st[2]) or 0, st[3] or ''
if ARGV[4] ~= '' and ARGV[4] ~= inc then return {inc, gen, {}, 0, data_of} end
local left, hold = tonumber(ARGV[5]), tonumber(ARGV[6])
local wait = 0
local out = {}
local acks = redo_acks_current(KEYS[3], KEYS[1])
for k = 4, #KEYS do
  local a = 7 + (k - 4) * 2
  local key, after, pid = KEYS[k], tonumber(ARGV[a]), ARGV[a + 1]
  local head, err = int(redis.call('HGET', KEYS[2], key), KEYS[2] .. ' ' .. key)
  if err then return err end
  local acked, first
  acked, err = int(redis.call('HGET', KEYS[3], key), KEYS[3] .. ' ' .. key)
  if err then return err end
  if not acks then acked = 0 end
  first, err = redo_first(KEYS[2], key)
  if err then return err end
  -- the position's check (redo_holds): past the head, or the queue no
  -- longer holds the landed part there
  local rewound = 0
  if after > head or not redo_holds(key, after, pid, acked) then rewound = 1 end
  local entries, trimmed, held, problem = {}, 0, 0, {}
  if rewound == 0 and head > after and left > 0 then
    local e = redo_range(key, after, left, head, first)
    for i = 1, #e, 2 do
      local entry, pk, why = redoEntry(e[i], e[i + 1], key)
      if not entry then
        -- a part record that cannot be read, or is gone while its part
        -- is listed undecided (redoEntry), ends the queue's entries
        -- there, as a held one does (the consumer's position stays a
        -- prefix), and is reported; the other queues are read as usual
        problem = {tonumber(e[i + 1]), e[i], pk, why}
        break
      end
      -- a part pending for less than hold ms is held back, and every
      -- entry after it (the consumer's position stays a prefix)
      local young = hold - (now - entry[7])
      if hold > 0 and entry[6] == 'pending' and young > 0 then
        held = 1
        if wait == 0 or young < wait then wait = young end
        break
      end
      entries[#entries + 1] = entry
    end
    left = left - #entries
    if #e > 0 then trimmed = tonumber(e[2]) - after - 1 else trimmed = head - after end
  end
  out[#out + 1] = {head, acked, rewound, entries, trimmed, held, problem}
end
return {inc, gen, out, wait, data_of}
