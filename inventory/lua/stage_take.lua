
local key = KEYS[4]
local status, moved, token = order_head(key, true)
if moved then
  -- moved to another node by a topology change (migrate.go): dead here
  redis.call('DEL', key)
  status, token = nil, nil
end
local takeover = ARGV[12] == 'stage-takeover' and status == 'failed' and token ~= ARGV[5]
if status and not takeover then return {'existing', status, token or ''} end
zset_ok(KEYS[2]) -- the pending index must be a sorted set
local plan, err = plan_parts(5, 13, ARGV[7], KEYS[3])
if err then return err end
if not plan then return {'short'} end
local deadline = now + tonumber(ARGV[8])
-- the record the caller encoded (rectemplate.go), the node's clock as its
-- created field (a takeover replaces the failed record)
set_value(key, ARGV[10] .. nowS .. ARGV[11], tonumber(ARGV[9]))
local out = {'staged', deadline}
for _, off in ipairs(write_parts(plan, KEYS[2], KEYS[3], part_due(ARGV[6]))) do
  out[#out + 1] = off
end
return out
