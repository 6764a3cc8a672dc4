
local key = KEYS[4]
local status, moved, token = order_head(key, true)
if moved then
  -- moved to another node by a topology change (migrate.go): dead here
  redis.call('DEL', key)
  status, token = nil, nil
end
local takeover = ARGV[13] == 'stage-takeover' and status == 'failed' and token ~= ARGV[5]
if status and not takeover then return {'existing', status, token or ''} end
zset_ok(KEYS[2]) -- the pending index must be a sorted set
local plan, err = plan_parts(5, 14, ARGV[9], KEYS[3])
if err then return err end
if not plan then return {'short'} end
local deadline = now + tonumber(ARGV[10])
-- (a takeover replaces the failed record; no user for an order without one)
order_write(key, tonumber(ARGV[11]), 'staging', ARGV[5], now, deadline, ARGV[8], ARGV[12], ARGV[9],
  now + tonumber(ARGV[7]))
local out = {'staged', deadline}
for _, off in ipairs(write_parts(plan, KEYS[2], KEYS[3], ARGV[4], ARGV[5], part_due(ARGV[6]))) do
  out[#out + 1] = off
end
return out
