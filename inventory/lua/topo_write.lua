
local cur = redis.call('HGET', KEYS[1], 'epoch') or ''
if cur == ARGV[3] and redis.call('EXISTS', KEYS[2]) == 1 then
  -- the apply attempt (topology.Record.Attempt) is compared and set too:
  -- a write of another attempt at the same token is refused (two fresh
  -- applies of one topology at once: the first to reach a node wins, the
  -- other stops there); one that names an attempt gives it to a record
  -- without one
  local att = redis.call('HGET', KEYS[2], 'attempt')
  if ARGV[8] and ARGV[8] ~= '' then
    if att and att ~= ARGV[8] then
      return redis.error_reply('SHARDIS_EPOCH node ' .. ARGV[1] .. ' is at topology ' .. cur ..
        ' by another apply (attempt ' .. att .. ', not ' .. ARGV[8] .. ')')
    end
    if not att then redis.call('HSET', KEYS[2], 'attempt', ARGV[8]) end
    redis.call('HSET', KEYS[1], 'attempt', ARGV[8])
  end
  if ARGV[7] == 'stable' then redis.call('HSET', KEYS[2], 'phase', 'stable') end
  return 'ok'
end
if cur ~= ARGV[2] and cur ~= ARGV[3] then
  return redis.error_reply('SHARDIS_EPOCH node ' .. ARGV[1] .. ' is at topology ' .. (cur == '' and 'none' or cur) ..
    ', expected ' .. (ARGV[2] == '' and 'none' or ARGV[2]))
end
local t = redis.call('TIME')
-- the stamp names the attempt too, which an accept compares with the
-- peers' (node.TopoStamp)
redis.call('HSET', KEYS[1], 'epoch', ARGV[3])
if ARGV[8] and ARGV[8] ~= '' then
  redis.call('HSET', KEYS[1], 'attempt', ARGV[8])
else
  redis.call('HDEL', KEYS[1], 'attempt')
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'epoch', ARGV[4], 'token', ARGV[3], 'current', ARGV[5], 'prev', ARGV[6],
  'phase', ARGV[7], 'at', t[1])
if ARGV[8] and ARGV[8] ~= '' then redis.call('HSET', KEYS[2], 'attempt', ARGV[8]) end
return 'ok'
