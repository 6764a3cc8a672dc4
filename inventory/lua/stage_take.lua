
local key = KEYS[4]
local f = redis.call('HMGET', key, 'status', 'token', 'moved')
if f[3] then
  -- moved to another node by a topology change (migrate.go): dead here
  redis.call('DEL', key)
  f = {}
end
local takeover = ARGV[13] == 'stage-takeover' and f[1] == 'failed' and f[2] ~= ARGV[5]
if f[1] and not takeover then return {'existing', f[1], f[2] or ''} end
zset_ok(KEYS[2]) -- the pending index must be a sorted set
local plan, err = plan_parts(5, 14, ARGV[9], KEYS[3])
if err then return err end
if not plan then return {'short'} end
local deadline = now + tonumber(ARGV[10])
if takeover then redis.call('DEL', key) end
redis.call('HSET', key, 'status', 'staging', 'token', ARGV[5], 'lease', I(now + tonumber(ARGV[7])), 'digest', ARGV[8],
  'deadline', I(deadline), 'created', nowS, 'parts', ARGV[12])
if ARGV[9] ~= '' then redis.call('HSET', key, 'user', ARGV[9]) end -- none for an order without a user
redis.call('EXPIRE', key, I(tonumber(ARGV[11])))
local out = {'staged', deadline}
for _, off in ipairs(write_parts(plan, KEYS[2], KEYS[3], ARGV[4], ARGV[5], part_due(ARGV[6]))) do
  out[#out + 1] = off
end
return out
