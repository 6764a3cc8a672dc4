-- The redo log's layout (redolog.go holds its rule). Queue xk's entries
-- (score the offset, member the part id) are kept in three places, each
-- holding one run of offsets, every one below the next place's:
--   1. xk itself: entries written by the release before the segments;
--   2. segments of REDO_SEG_V1 consecutive offsets, xk .. ':' ..
--      floor(o / REDO_SEG_V1): entries of the release before this one;
--   3. segments of REDO_SEG consecutive offsets, xk .. ':s' ..
--      floor(o / REDO_SEG): every entry this release writes, from the
--      queue's first offset in them on, which field redo_first_field(xk)
--      of the redo offsets hash holds (written with the head by the first
--      script call that hands out an offset of xk: flush, prelude.lua).
-- Both kinds of segment stay listpacks. REDO_SEG is small because Redis
-- walks a listpack sorted set twice to add an entry at its end (ZADD
-- looks the member up, then the score's place): at 32 offsets an entry
-- costs the node half the instructions it did at 100 (redolog.go).
local REDO_SEG, REDO_SEG_V1 = 32, 100
-- redo_segkey(xk, s): segment number s of queue xk; redo_segkey_v1(xk,
-- s): the release before's; redo_seg(xk, off): the segment this release
-- writes offset off to.
local function redo_segkey(xk, s) return xk .. ':s' .. I(s) end
local function redo_segkey_v1(xk, s) return xk .. ':' .. I(s) end
-- (redo_seg keeps the last key it built per queue: a script call hands
-- out offsets of one segment after another.)
local segkeys = {}
local function redo_seg(xk, off)
  local s = (off - off % REDO_SEG) / REDO_SEG -- floor, without a C call
  local c = segkeys[xk]
  if c and c[1] == s then return c[2] end
  local k = redo_segkey(xk, s)
  segkeys[xk] = {s, k}
  return k
end
-- redo_ok(offsets, xk, n): after offsets_ok(offsets, xk), the segment of
-- the n-th offset next_offset will hand out in queue xk is a sorted set
-- (or absent): checked once per segment, before any write.
local function redo_ok(offsets, xk, n)
  -- the queue's last offset (offtab's) and zset_ok's test inline: a Lua
  -- call costs the node about 600 instructions, and this runs once per
  -- part taken
  local seg = redo_seg(xk, offtab[offsets][xk][1] + n)
  if not zchecked[seg] then zset_ok(seg) end
end
-- redo_first(offsets, xk): queue xk's first offset in this release's
-- segments (nil when it has none: nothing handed out since the upgrade),
-- or nil and a SHARDIS_CORRUPT error reply when the field is not an
-- integer.
local function redo_first(offsets, xk)
  local fk = redo_first_field(xk)
  local v = redis.call('HGET', offsets, fk)
  if not v then return nil end
  return int(v, offsets, ' ' .. fk)
end
-- redo_gens(head, first): the kinds of segment that may hold entries of a
-- queue whose head is head and whose first offset in this release's
-- segments is first (redo_first), in offset order, each {its key
-- function, its size, the number of its highest segment that can hold
-- an entry}: the release before's up to first - 1's (head's when first
-- is nil), then this release's up to head's. Each kind's segments that
-- hold entries are one run ending at that highest one (the log is
-- gap-free and only ever loses its lowest entries), which holds an entry
-- whenever the kind holds any.
local function redo_gens(head, first)
  local g = {}
  local top = head
  if first then top = first - 1 end
  if top > 0 then g[#g + 1] = {redo_segkey_v1, REDO_SEG_V1, math.floor(top / REDO_SEG_V1)} end
  if first and head >= first then g[#g + 1] = {redo_segkey, REDO_SEG, math.floor(head / REDO_SEG)} end
  return g
end
-- redo_low(xk, g, lo): the lowest segment number s >= lo of kind g
-- (redo_gens) of queue xk that holds an entry, nil if none: a binary
-- search over EXISTS (the run ends at g's highest segment).
local function redo_low(xk, g, lo)
  local key, hi = g[1], g[3]
  if lo > hi or redis.call('EXISTS', key(xk, hi)) == 0 then return nil end
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if redis.call('EXISTS', key(xk, mid)) == 1 then hi = mid else lo = mid + 1 end
  end
  return lo
end
-- redo_range(xk, after, limit, head, first): up to limit entries of
-- queue xk with an offset past after, in offset order, as ZRANGEBYSCORE
-- … WITHSCORES returns them (part id, offset, …): the entries still in xk
-- itself first, then each kind of segment's (redo_gens) from the one
-- after lies in (or the lowest left).
local function redo_range(xk, after, limit, head, first)
  local e = redis.call('ZRANGEBYSCORE', xk, '(' .. I(after), '+inf', 'WITHSCORES', 'LIMIT', 0, limit)
  local from = after
  if #e > 0 then from = tonumber(e[#e]) end
  local left = limit - #e / 2
  for _, g in ipairs(redo_gens(head, first)) do
    if left <= 0 or from >= head then break end
    local key, hi = g[1], g[3]
    local s = math.floor((from + 1) / g[2])
    if s <= hi and redis.call('EXISTS', key(xk, s)) == 0 then s = redo_low(xk, g, s + 1) end
    while s and left > 0 and s <= hi do
      local more = redis.call('ZRANGEBYSCORE', key(xk, s), '(' .. I(from), '+inf', 'WITHSCORES', 'LIMIT', 0, left)
      for _, v in ipairs(more) do e[#e + 1] = v end
      if #more > 0 then from = tonumber(more[#more]) end
      left = left - #more / 2
      s = s + 1
    end
  end
  return e
end
-- redo_at(xk, off): the part id at offset off of queue xk, nil when none:
-- looked up in this release's segment for off, then the release
-- before's, then xk itself (an offset is in one place only).
local function redo_at(xk, off)
  local o = I(off)
  local at = redis.call('ZRANGEBYSCORE', redo_seg(xk, off), o, o)
  if #at == 0 then at = redis.call('ZRANGEBYSCORE', redo_segkey_v1(xk, math.floor(off / REDO_SEG_V1)), o, o) end
  if #at == 0 then at = redis.call('ZRANGEBYSCORE', xk, o, o) end
  return at[1]
end
-- The acknowledged offsets (inv:redo:acked) belong to the incarnation in
-- the hash's field inc. A node accepted with a copy of its data keeps the
-- acknowledgements consumers gave its earlier incarnation, which say
-- nothing of what was landed of it since (a consumer lands the new
-- incarnation from a new position: pgsync re-reads it, and meets there
-- the parts the node settled differently from the rows, its conflicts),
-- so they count as none until a consumer acknowledges the new one. A hash
-- without the field (acknowledgements of an earlier release) counts as
-- the node's.
local function redo_acks_current(acked, stamp)
  local inc = redis.call('HGET', acked, 'inc')
  return not inc or inc == (redis.call('HGET', stamp, 'incarnation') or '')
end
-- redo_acks_own(acked, inc): before an acknowledgement at incarnation
-- inc, the acknowledgements of another one are dropped.
local function redo_acks_own(acked, inc)
  local was = redis.call('HGET', acked, 'inc')
  if was ~= inc then
    if was then redis.call('DEL', acked) end
    redis.call('HSET', acked, 'inc', inc)
  end
end
