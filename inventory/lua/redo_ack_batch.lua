
local inc = redis.call('HGET', KEYS[1], 'incarnation') or ''
if inc ~= ARGV[4] then
  return redis.error_reply(string.format('SHARDIS_INCARNATION node is at incarnation %q, the acknowledgement is for %q', inc, ARGV[4]))
end
local acks = redo_acks_current(KEYS[3], KEYS[1])
for k = 4, #KEYS do
  local a = 5 + (k - 4) * 2
  local key, off, pid = KEYS[k], tonumber(ARGV[a]), ARGV[a + 1]
  local head, err = int(redis.call('HGET', KEYS[2], key), KEYS[2] .. ' ' .. key)
  if err then return err end
  if off > head then
    return redis.error_reply('SHARDIS_RANGE ack offset ' .. ARGV[a] .. ' is past the head of ' .. key .. ' (last offset handed out ' .. I(head) .. ')')
  end
  local acked, aerr = int(redis.call('HGET', KEYS[3], key), KEYS[3] .. ' ' .. key)
  if aerr then return aerr end
  if not acks then acked = 0 end
  local holds, at = redo_holds(key, off, pid, acked)
  if not holds then return redo_rewound_reply(key, ARGV[a], at, pid) end
end
redo_acks_own(KEYS[3], inc)
local out = {}
for k = 4, #KEYS do
  local off = tonumber(ARGV[5 + (k - 4) * 2])
  local cur = tonumber(redis.call('HGET', KEYS[3], KEYS[k])) or 0
  if off > cur then redis.call('HSET', KEYS[3], KEYS[k], off) cur = off end
  out[#out + 1] = cur
end
return out
