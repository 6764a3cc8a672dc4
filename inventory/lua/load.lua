
-- a call run after its deadline (ARGV[7], ms by this node's clock, which
-- LoadStock read just before sending it) adds nothing: once the deadline
-- has passed, a read of the stock shows all a load whose reply was lost
-- added (load_deadline.go)
if now > tonumber(ARGV[7]) then
  return redis.error_reply('SHARDIS_LATE the load reached the node after its deadline: nothing added')
end
local add, limit = tonumber(ARGV[4]), tonumber(ARGV[5])
if v[1] + add > 9007199254740000 or v[4] + add > 9007199254740000 then
  return redis.error_reply('SHARDIS_RANGE stock would exceed 2^53')
end
-- a limit is only ever replaced by one of a higher version (limits.go):
-- an older change's call that arrives last must not undo a newer one (a
-- change of the same version: the higher limit, so every node ends at the
-- same one whatever order the calls arrive in); read before any write
local setLimit = false
if limit >= 0 then
  local cv, err = int(redis.call('HGET', KEYS[2], 'limit_ver'), KEYS[2] .. ' limit_ver')
  if err then return err end
  local nv = tonumber(ARGV[6])
  setLimit = cv < nv or (cv == nv and v[5] < limit)
end
-- the redo offsets hash the takes of this stock will read: a hash table
-- (redo_pad; it stays one once it is)
redo_pad(REDO_OFFSETS)
if add > 0 then
  v[1] = redis.call('HINCRBY', KEYS[2], 'available', add)
  v[4] = redis.call('HINCRBY', KEYS[2], 'loaded', add)
end
if setLimit then
  redis.call('HSET', KEYS[2], 'limit', limit, 'limit_ver', ARGV[6])
  v[5] = limit
end
return v
