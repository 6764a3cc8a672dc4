
local key = KEYS[2]
local status, moved = order_head(key)
if status and not moved and status ~= 'failed' then return {'existing'} end
zset_ok(KEYS[3]) -- the pending index must be a sorted set
local plan, err, short = plan_parts(5, 11, ARGV[6], KEYS[4])
if err then return err end
if not plan then return {short and 'short' or 'fallback'} end
local deadline = now + tonumber(ARGV[7])
local offs = write_parts(plan, KEYS[3], KEYS[4], ARGV[9], ARGV[4], deadline + tonumber(ARGV[10]))
local parts, out = {}, {'reserved', deadline}
for i, p in ipairs(plan) do
  local j = {id = p.id, kind = p.kind, item = p.item, node = ARGV[1], route = p.route, sku = p.sku, qty = p.want, redo = '', offset = 0}
  if p.kind == 's' then j.redo, j.offset = p.xk, offs[i] end
  parts[#parts + 1] = j
  out[#out + 1] = offs[i]
end
-- replaces a failed or moved record; reserved when created: no
-- reserved_at (it would repeat created), and no user for an order without
-- one (DecodeOrder reads both as before)
order_write(key, tonumber(ARGV[8]), 'reserved', ARGV[4], now, deadline, ARGV[5], pack_parts(ARGV[9], ARGV[4], parts),
  ARGV[6])
return out
