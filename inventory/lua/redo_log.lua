-- The redo log's layout (redolog.go holds its rule). Queue xk's entries
-- (score the offset, member the part id) live in segments of REDO_SEG
-- consecutive offsets: offset o is in the sorted set
-- xk .. ':' .. floor(o / REDO_SEG), small enough to stay a listpack.
-- Entries written before the segments (by a release before) are in xk
-- itself until trimmed, every one of them below every segment's.
local REDO_SEG = 100
-- redo_segkey(xk, s): segment number s of queue xk; redo_seg(xk, off):
-- the segment that holds offset off.
local function redo_segkey(xk, s) return xk .. ':' .. I(s) end
-- (redo_seg keeps the last key it built per queue: a script call hands
-- out offsets of one segment after another.)
local segkeys = {}
local function redo_seg(xk, off)
  local s = math.floor(off / REDO_SEG)
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
  zset_ok(redo_seg(xk, offset_at(offsets, xk) + n))
end
-- redo_low(xk, lo, head): the lowest segment number s >= lo of queue xk
-- that holds an entry, nil if none up to head's (head: the last offset
-- handed out). The segments holding entries are one run that ends at
-- head's (the log is gap-free and only ever loses its lowest entries), so
-- a binary search over EXISTS finds it.
local function redo_low(xk, lo, head)
  local hi = math.floor(head / REDO_SEG)
  if lo > hi or redis.call('EXISTS', redo_segkey(xk, hi)) == 0 then return nil end
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if redis.call('EXISTS', redo_segkey(xk, mid)) == 1 then hi = mid else lo = mid + 1 end
  end
  return lo
end
-- redo_range(xk, after, limit, head): up to limit entries of queue xk with
-- an offset past after, in offset order, as ZRANGEBYSCORE … WITHSCORES
-- returns them (part id, offset, …): the entries still in xk itself first,
-- then the segments from the one after lies in (or the lowest left).
local function redo_range(xk, after, limit, head)
  local e = redis.call('ZRANGEBYSCORE', xk, '(' .. I(after), '+inf', 'WITHSCORES', 'LIMIT', 0, limit)
  local from = after
  if #e > 0 then from = tonumber(e[#e]) end
  local left = limit - #e / 2
  if left <= 0 or from >= head then return e end
  local s = math.floor((from + 1) / REDO_SEG)
  if redis.call('EXISTS', redo_segkey(xk, s)) == 0 then s = redo_low(xk, s + 1, head) end
  while s and left > 0 and s * REDO_SEG <= head do
    local more = redis.call('ZRANGEBYSCORE', redo_segkey(xk, s), '(' .. I(from), '+inf', 'WITHSCORES', 'LIMIT', 0, left)
    for _, v in ipairs(more) do e[#e + 1] = v end
    left = left - #more / 2
    s = s + 1
  end
  return e
end
-- redo_at(xk, off): the part id at offset off of queue xk, nil when none.
local function redo_at(xk, off)
  local at = redis.call('ZRANGEBYSCORE', redo_seg(xk, off), I(off), I(off))
  if #at == 0 then at = redis.call('ZRANGEBYSCORE', xk, I(off), I(off)) end
  return at[1]
end
