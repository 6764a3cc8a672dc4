-- the settled log after a cursor (settledlog.go: ReadSettled): the log's
-- counts and its first entry's id come from XINFO STREAM's flat name,
-- value reply (first-entry is {id, fields}, or nil for an empty log); the
-- range starts at the cursor's own entry, inclusive, so that one read
-- also tells whether the log still holds it (held), which Advance needs
-- to know the log is the one the cursor was in. ARGV[4] is the cursor's
-- id, or 0-0 (no entry has it) before the first.
local inc = redis.call('HGET', KEYS[1], 'incarnation') or ''
if redis.call('EXISTS', KEYS[2]) == 0 then return {inc, 0, 0, {}, 0, ''} end
local info, added, length, first = redis.call('XINFO', 'STREAM', KEYS[2]), 0, 0, ''
for i = 1, #info - 1, 2 do
  local k = info[i]
  if k == 'entries-added' then
    added = info[i + 1]
  elseif k == 'length' then
    length = info[i + 1]
  elseif k == 'first-entry' and info[i + 1] then
    first = info[i + 1][1]
  end
end
local limit = tonumber(ARGV[5])
local e = redis.call('XRANGE', KEYS[2], ARGV[4], '+', 'COUNT', limit + 1)
local held, from = 0, 1
if e[1] and e[1][1] == ARGV[4] then held, from = 1, 2 end
local out = {}
for i = from, math.min(#e, from + limit - 1) do
  out[#out + 1] = e[i][1]
  out[#out + 1] = e[i][2][2]
end
return {inc, added, length, out, held, first}
