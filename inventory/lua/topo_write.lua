
local cur = redis.call('HGET', KEYS[1], 'epoch') or ''
-- the incarnation the write expects (ARGV[9], "" = any): step 4 writes a
-- node stable only at the one read before step 3 began, a move forward
-- only at the one read before its take back, a repair of a lost record
-- only at the one read with it; a node accepted since holds a copy that
-- may be from before step 3 (or the take back) moved its counters off it
-- (topology doc.go, "A copy taken during step 3", "A lost record"). A
-- record stable at the token already is left as it is, whatever the
-- incarnation.
if ARGV[9] and ARGV[9] ~= '' then
  local inc = redis.call('HGET', KEYS[1], 'incarnation') or ''
  if inc ~= ARGV[9] and not (cur == ARGV[3] and redis.call('HGET', KEYS[2], 'phase') == 'stable') then
    return redis.error_reply('SHARDIS_EPOCH node ' .. ARGV[1] .. ' is at incarnation ' .. inc .. ', not ' .. ARGV[9] ..
      ' as when it was read before step 3 (or its move forward, or with its lost record): it was accepted since, with a copy of its data that step 3 (or the take back) may not have seen; not written ' .. ARGV[7])
  end
end
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
