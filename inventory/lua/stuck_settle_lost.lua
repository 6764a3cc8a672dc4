-- A part set aside whose own record is gone, settled by the operator's
-- account of what its record held (stuck_settle_lost.go holds the rule).
-- Everything is checked before any write: the part set aside, its record
-- absent (no key, and no inline part: part_get), its counter able to give
-- up the units (a stock part's hash: stock_settle_check; a quota part's
-- user's count: an integer string holding at least the quantity); then
-- part_settle moves the units (a quota part's cancel takes them off the
-- count, its confirm keeps them), writes the record settled, and takes
-- the part out of the pending and stuck indexes, as every settle does.
local id, action, q, retention, kind = ARGV[4], ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[12]
if action ~= 'confirm' and action ~= 'cancel' then
  return redis.error_reply('SHARDIS_BADOP settle action ' .. tostring(action) .. ' is not confirm or cancel')
end
if kind ~= 's' and kind ~= 'q' then
  return redis.error_reply('SHARDIS_BADOP part kind ' .. tostring(kind) .. ' of part ' .. KEYS[3] .. ' is not s or q')
end
local since = redis.call('ZSCORE', KEYS[2], id)
local p, bad = part_try(KEYS[3])
if bad then
  if string.sub(bad, 1, 8) == 'SHARDIS_' then return redis.error_reply(bad) end
  return redis.error_reply('SHARDIS_CORRUPT part record ' .. KEYS[3] .. ': ' .. bad)
end
-- ARGV[13] 'stuck-lost-unfenced' (test-only, faults.go:
-- MutationStuckLostUnfenced) drops the fence below: a settled part is
-- settled again
local unfenced = ARGV[13] == 'stuck-lost-unfenced'
if not since and not unfenced then return {'notstuck', (p or {}).state or ''} end
-- a tombstone of a part set aside stands for its lost record
-- (pend_lost): a cancel that did not know the part's place wrote it
if p and p.tombstone ~= '1' then
  -- settled: an entry a settle left behind (part_settle takes the part
  -- out of the stuck index; a release before did only for a record
  -- holding stuck_since), never settled again
  local settled = p.state == 'confirmed' or p.state == 'cancelled'
  if settled and not unfenced then return {'settled', p.state} end
  if not settled then return {'exists', p.state or ''} end
end
local confirm = action == 'confirm'
if kind == 's' then
  local err = stock_settle_check(KEYS[4], KEYS[3], q, confirm, 'SHARDIS_RANGE')
  if err then return err end
else
  -- the user's count, refused before any write rather than taken below
  -- what the part held (another user's count, too many units, a count
  -- moved off the node)
  local err = quota_settle_check(KEYS[4], KEYS[3], q, 'SHARDIS_RANGE')
  if err then return err end
end
local rec = {kind = kind, qty = ARGV[6], counter = KEYS[4], sku = ARGV[10], item = ARGV[11], order = ARGV[8],
  token = ARGV[9], stuck_since = since}
part_settle(KEYS[3], id, rec, q, confirm, retention)
return {'done', rec.state}
