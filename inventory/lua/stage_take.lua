
local key = KEYS[2]
local status, moved, token = order_head(key, true)
if moved then
  -- moved to another node by a topology change (migrate.go): dead here
  redis.call('DEL', key)
  status, token = nil, nil
end
local takeover = ARGV[12] == 'stage-takeover' and status == 'failed' and token ~= ARGV[5]
if status and not takeover then return {'existing', status, token or ''} end
zset_ok(PENDING) -- the pending index must be a sorted set
local deadline = now + Nttl(ARGV[8])
local out = {'staged', deadline}
if #KEYS == 5 and ARGV[14] == 's' then
  -- one stock part (its keys 3 to 5, its arguments from 13): take_one,
  -- the same steps without the plan's tables
  local off, err = take_one(KEYS[3], KEYS[4], KEYS[5], ARGV[13], Nqty(ARGV[15]), ARGV[16], ARGV[17], ARGV[7],
    PENDING, REDO_OFFSETS, part_due(ARGV[6]))
  if err then return err end
  if not off then return {'short'} end
  out[3] = off
else
  local plan, err = plan_parts(KEYS, ARGV, kb + 3, ab + 13, (#KEYS - 2) / 3, ARGV[7], REDO_OFFSETS, false)
  if err then return err end
  if not plan then return {'short'} end
  for _, off in ipairs(write_parts(plan, PENDING, REDO_OFFSETS, part_due(ARGV[6]))) do
    out[#out + 1] = off
  end
end
-- the record the caller encoded (rectemplate.go), the node's clock as its
-- created field (a takeover replaces the failed record)
set_value(key, ARGV[10] .. nowS .. ARGV[11], tonumber(ARGV[9]))
return out
