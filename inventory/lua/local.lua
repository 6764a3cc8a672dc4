
local key = KEYS[2]
local status, moved = order_head(key)
if status and not moved and status ~= 'failed' then return {'existing'} end
zset_ok(KEYS[3]) -- the pending index must be a sorted set
local np = (#KEYS - 4) / 3
local deadline = now + tonumber(ARGV[6])
local pdl = deadline + tonumber(ARGV[7])
-- the record the caller encoded (rectemplate.go), the node's values in
-- its holes: created, then each part's offset (none for a quota part);
-- it replaces a failed or moved record, reserved: no TTL until decided
-- (orderrec.go)
if np == 1 and ARGV[12] == 's' then
  -- one stock part (one item, no user): take_one, the same steps
  -- without the plan's tables; the part is inline (no record of its own:
  -- the order record written below holds it, inline.go), as every stock
  -- part of this script is
  local off, err, short = take_one(KEYS[5], KEYS[6], KEYS[7], ARGV[11], tonumber(ARGV[13]), ARGV[14], ARGV[15], ARGV[5],
    KEYS[3], KEYS[4], pdl, true)
  if err then return err end
  if not off then return {short and 'short' or 'fallback'} end
  set_value(key, ARGV[8] .. nowS .. ARGV[9] .. I(off) .. ARGV[10], false)
  return {'reserved', deadline, off}
end
local plan, err, short, over = plan_parts(KEYS, ARGV, 5, 10 + np, ARGV[5], KEYS[4])
if err then return err end
if over then return {'limit', over[1], over[2], over[3]} end
if not plan then return {short and 'short' or 'fallback'} end
-- its stock parts inline too (inline.go); a quota part has its record
local offs = write_parts(plan, KEYS[3], KEYS[4], pdl, true)
local rec, out = {ARGV[8], nowS, ARGV[9]}, {'reserved', deadline}
for i, off in ipairs(offs) do
  rec[#rec + 1] = off ~= 0 and I(off) or ''
  rec[#rec + 1] = ARGV[9 + i]
  out[#out + 1] = off
end
set_value(key, table.concat(rec), false)
return out
