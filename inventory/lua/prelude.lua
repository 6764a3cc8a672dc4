-- The prelude library: the definitions a script may use (lua.go). A
-- script carries only those it mentions and what they use (lualib.go: a
-- definition starts at a column-0 line "local …", with the comment lines
-- right above it), so each is cheap to leave out.

-- memo(f): f, keeping the last value it gave: a call with the argument
-- of the call before (the same number, or the same string: Lua interns
-- them) returns that value without calling f again.
local function memo(f)
  local last, v
  return function(x)
    if x ~= last then last, v = x, f(x) end
    return v
  end
end
-- An integer as a command argument: Redis 7.0 formats a Lua number
-- argument with printf's "%.17g" (slow), string.format('%d') is an
-- integer conversion; both give the same digits below 2^53. A format
-- costs the node about 1,000 instructions, and an order formats the same
-- few again and again, so I keeps the last one (a part's offset goes into
-- its order record, its redo entry's score and its pending-index member)
-- and Idl is I for deadlines, Iq for a part's quantity, each keeping
-- its own (the orders of one script call with one TTL share their
-- deadline, and mostly their quantity).
local I, Idl, Iq
do
  local function d(n) return string.format('%d', n) end
  I, Idl, Iq = memo(d), memo(d), memo(d)
end
-- reserved_head(deadline) and staged_head(deadline): the head of the
-- local reserve's reply for a reserved order ('reserved:' and the
-- deadline) and of the stage's for a staged one ('staged:' and the
-- deadline); the offsets follow, each after a ':' (local.lua,
-- stage_take.lua; replyReader.headInts reads them). One string rather
-- than a table: in a group, a table reply costs the node about 2,500
-- instructions more per order. Each keeps its last, as Idl does.
-- pending_head(qty) is the reserve script's, for one part it takes now:
-- 'pending:' and the quantity, then the offset and the SKU's limit
-- (reserve.lua). head_memo(word) makes one of them.
local function head_memo(word)
  return memo(function(n) return word .. ':' .. string.format('%d', n) end)
end
local reserved_head = head_memo('reserved')
local staged_head = head_memo('staged')
local pending_head = head_memo('pending')
-- Nttl, Nqty and Nret: tonumber, each keeping its last (tonumber of a
-- string parses it twice, about 900 instructions; the orders of one
-- script call mostly bring the same TTL, quantity and record retention).
-- (tonumber is called from a function of the library rather than passed
-- as it is: a function library's top level cannot read a global,
-- luafunc.go, so Nttl and its siblings are made once per library, not
-- once per call.)
local Nttl, Nqty, Nret
do
  local function num(s) return tonumber(s) end
  Nttl, Nqty, Nret = memo(num), memo(num), memo(num)
end
-- set_value(key, s, ttl): SET key to string s (a packed record: the part
-- and order codecs), its TTL kept when ttl is nil, none when ttl is false
-- (the key lives until a write gives it one), else set to ttl seconds (at
-- most 0: expired, as EXPIRE would).
local function set_value(key, s, ttl)
  if ttl == false then
    redis.call('SET', key, s)
  elseif ttl and ttl > 0 then
    redis.call('SET', key, s, 'EX', I(ttl))
  else
    redis.call('SET', key, s, 'KEEPTTL')
    if ttl then redis.call('EXPIRE', key, I(ttl)) end
  end
end
-- The node's pending index and redo offsets hash (PendingKey,
-- RedoOffsetsKey), for a script that names them itself rather than take
-- them as keys in every call (the reserve scripts: local.go, staged.go,
-- scripts.go), and a part's grace past its order's deadline in ms
-- (partGrace, reserve.go).
local PENDING, REDO_OFFSETS, PART_GRACE = 'inv:pending', 'inv:redo:offsets', 1000
-- The redo offsets hash's pad (RedoOffsetsPad, redolog.go): a field whose
-- value, over 64 bytes, keeps the hash a hash table, so a field is one
-- lookup, not a walk of a listpack; redo_pad(offsets) sets it when it is
-- missing (flush, with a queue's first offset; load.lua).
local REDO_PAD, REDO_PAD_TEXT = '~encoding', 'over 64 bytes, so that Redis keeps this hash as a hash table: one lookup per field, not a walk (inventory/redolog.go)'
local function redo_pad(offsets) redis.call('HSETNX', offsets, REDO_PAD, REDO_PAD_TEXT) end
-- The tail of a layout 2 part entry after its offset (appendLayout2Entry)
-- for a part with no incarnation and the id the reserve paths derive,
-- which every part of the local path is: the local reserve's short layout
-- sends its record's tail only when it is another (localOneCall).
local LOCAL_TAIL = '\031\031'
-- The node's clock (ms): one TIME call, in the scripts that read it.
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local nowS = I(now)
-- int(v, what, suffix, tail): v (a reply's value: false or nil for none,
-- 0) as an integer, or nil and a SHARDIS_CORRUPT error reply naming what
-- .. suffix .. tail (joined only then: the check runs on every hot path,
-- once per field of each counter and queue a script call reads, so a
-- call of orders of distinct SKUs runs it several times per order) when
-- v is not one: a string of decimal digits with no leading zero, or a
-- number with no fraction. Two C calls for the usual string (tonumber,
-- then string.find, which makes no string of the match as string.match
-- does); the fraction is tested by n % 1, which is nan for inf and nan,
-- and type() only for a value that find refused (a number whose %.14g
-- form is not all digits).
local sfind = string.find
local function int(v, what, suffix, tail)
  if v == false or v == nil then return 0 end
  local n = tonumber(v)
  if n == nil or n % 1 ~= 0 or (v ~= '0' and not sfind(v, '^%-?[1-9]%d*$') and type(v) == 'string') then
    return nil, redis.error_reply('SHARDIS_CORRUPT ' .. what .. (suffix or '') .. (tail or '') .. ' holds ' .. tostring(v) .. ', not an integer')
  end
  return n
end
-- Work shared by the calls of one script call (all of a group's calls,
-- group.go). The rule that keeps it exact: a copy is kept only of what no
-- one but these helpers writes while the script runs (a script is atomic,
-- and the calls that use them write those keys only through them), and a
-- deferred write is one the calls never read back but through the copy.
--   zset_ok(key): key is a sorted set (or absent), checked once;
--   zadd_later(key, score, member): a ZADD sent by flush with the others
--     of the same key; the scripts that use it read those sets for their
--     type only;
--   stock_int(ck, i, suffix): field i of the stock hash ck (1 available,
--     2 limit, 3 reserved) as an integer, the hash read once (HMGET of
--     the three) and each field checked by int once (its error names ck
--     .. suffix; its number kept at i + 3 of the copy, so a later read is a
--     table lookup, not a type() call: a Lua call of a C function costs
--     the node hundreds of instructions; at 7, whether flush writes the
--     copy); stock_set(ck, avail, resv) changes the copy, and flush
--     writes each changed hash once (available and reserved);
--   offsets_ok(offsets, xk): the redo offsets field xk holds an integer
--     (int's check, once; it keeps the value read), and so does field
--     redo_first_field(xk) when there is one (the queue's first offset in
--     this release's segments: redo_log.lua); offtab[offsets][xk][1] is the
--     last offset handed out (after offsets_ok); next_offset(offsets, xk),
--     after offsets_ok, hands out the next offset, and flush writes the
--     last one handed out, and, when the queue had no such field, that
--     field (the first offset handed out), in the same HSET;
--   take_at: a take's calls of stock_set, next_offset and zadd_later in
--     one (see there).
-- The one-part paths (local.lua, stage_take.lua, reserve.lua) read and
-- change these copies in place, the helpers' steps written out
-- (take_whole.lua says why).
-- flush sends the deferred writes. The epilogues call it after the calls,
-- whatever they returned: a call that raised keeps its earlier writes, as
-- a lone script that raises does. It runs once per script call and leaves
-- the queues as they are: the next script call starts with tables of its
-- own (a function library assigns them afresh per call, luafunc.go; a
-- script sent as source defines them again).
--
-- Each helper's tables are their own definition, so a script pays for
-- those of the helpers it uses; flush (and the epilogue's call of it) is
-- in a script only when it uses zadd_later, stock_set or next_offset.
-- redo_first_field(xk): the field of the redo offsets hash that holds
-- queue xk's first offset in this release's segments (redolog.go,
-- RedoFirstSuffix).
local function redo_first_field(xk) return xk .. ':s' end
local zchecked = {}
local zqueued, zkeys = {}, {}
local stocks = {}
local skeys = {}
-- offtab[offsets][xk]: {the last offset handed out, whether flush writes
-- it, the first offset flush records in field redo_first_field(xk) (nil
-- when the queue has it), offsets, xk}: one table, made with its five
-- slots, is both the copy and okeys' entry (flush's list)
local offtab = {}
local okeys = {}
local function zset_ok(key)
  if not zchecked[key] then
    redis.call('ZCARD', key)
    zchecked[key] = true
  end
end
-- zqueue(key, score, member): a new queue of ZADD arguments for key,
-- holding score and member, which flush sends (zadd_later's, take_at's:
-- each calls it once per key per script call, the first time it queues
-- one). Made by a constructor with its first pair: a table grown from
-- empty is resized at its first and second element, about 600
-- instructions each (callgrind), and a call of SKUs no other order of it
-- has makes a queue per part.
local function zqueue(key, score, member)
  zqueued[key] = {score, member}
  zkeys[#zkeys + 1] = key
end
local function zadd_later(key, score, member)
  local q = zqueued[key]
  if not q then return zqueue(key, score, member) end
  q[#q + 1] = score
  q[#q + 1] = member
end
local function flush()
  for _, ck in ipairs(skeys) do
    local v = stocks[ck]
    redis.call('HSET', ck, 'available', I(v[4]), 'reserved', I(v[6]))
  end
  for _, e in ipairs(okeys) do
    e[2] = false
    if e[3] then
      redis.call('HSET', e[4], e[5], I(e[1]), redo_first_field(e[5]), I(e[3]))
      e[3] = nil
      redo_pad(e[4]) -- rare: once per queue
    else
      redis.call('HSET', e[4], e[5], I(e[1]))
    end
  end
  for _, key in ipairs(zkeys) do
    local q = zqueued[key]
    for i = 1, #q, 512 do
      redis.call('ZADD', key, unpack(q, i, math.min(i + 511, #q)))
    end
  end
end
local function stock_int(ck, i, suffix)
  local v = stocks[ck]
  if not v then
    -- the copy made with its seven slots (the three fields, their numbers,
    -- whether flush writes it): the reply's own table has four, and
    -- growing it resizes it twice, about 600 instructions each
    local r = redis.call('HMGET', ck, 'available', 'limit', 'reserved')
    v = {r[1], r[2], r[3], false, false, false, false}
    stocks[ck] = v
  end
  local n = v[i + 3]
  if n then return n end
  local err
  n, err = int(v[i], ck, suffix)
  if err then return nil, err end
  v[i + 3] = n
  return n
end
-- stock_dirty(ck, v): flush writes stock hash ck's copy v (stock_set's,
-- take_at's: once per hash per script call, the first time it changes).
local function stock_dirty(ck, v)
  v[7] = true
  skeys[#skeys + 1] = ck
end
local function stock_set(ck, avail, resv)
  local v = stocks[ck] -- stock_int read it (the plan)
  v[4], v[6] = avail, resv
  if not v[7] then stock_dirty(ck, v) end
end
local function offsets_ok(offsets, xk)
  local t = offtab[offsets]
  if not t then
    t = {}
    offtab[offsets] = t
  end
  if t[xk] then return true end
  local fk = redo_first_field(xk)
  local v = redis.call('HMGET', offsets, xk, fk)
  local n, err = int(v[1], offsets, ' ', xk)
  if err then return nil, err end
  local first
  if v[2] then
    local _, ferr = int(v[2], offsets, ' ', fk)
    if ferr then return nil, ferr end
  else
    first = n + 1
  end
  t[xk] = {n, false, first, offsets, xk}
  return true
end
-- offsets_dirty(o): flush writes offtab's entry o, its queue's last
-- offset (next_offset's, take_at's: once per queue per script call, the
-- first time it hands out an offset).
local function offsets_dirty(o)
  o[2] = true
  okeys[#okeys + 1] = o
end
local function next_offset(offsets, xk)
  local o = offtab[offsets][xk] -- offsets_ok(offsets, xk) ran first (the plan)
  o[1] = o[1] + 1
  if not o[2] then offsets_dirty(o) end
  return o[1]
end
-- take_at(ck, xk, id, avail, resv, off, offS, seg, pdlS, member): the
-- deferred writes of one stock part taken at offset off (offS: I(off)) of
-- queue xk, whose segment seg was checked: stock_set(ck, avail, resv),
-- next_offset(REDO_OFFSETS, xk) (which must hand out off: an error
-- otherwise, before anything is queued), zadd_later(seg, offS, id) and
-- zadd_later(PENDING, pdlS, member), written out in one function (it
-- calls their once-per-key steps, zqueue, stock_dirty and offsets_dirty,
-- only the first time a key changes): a take runs it once per part, and
-- a Lua call costs the node about 600 instructions. The one-part paths
-- of local.lua and reserve.lua write its steps out, under its argument
-- names, rather than call it (take_whole.lua says why).
local function take_at(ck, xk, id, avail, resv, off, offS, seg, pdlS, member)
  local o = offtab[REDO_OFFSETS][xk] -- offsets_ok ran first (the plan)
  if off ~= o[1] + 1 then
    error('take_at: offset ' .. tostring(off) .. ' of ' .. xk .. ' is not the next one, ' .. tostring(o[1] + 1))
  end
  o[1] = off
  if not o[2] then offsets_dirty(o) end
  local v = stocks[ck] -- the plan read it (stock_int)
  v[4], v[6] = avail, resv
  if not v[7] then stock_dirty(ck, v) end
  local q = zqueued[seg]
  if q then
    q[#q + 1] = offS
    q[#q + 1] = id
  else
    zqueue(seg, offS, id)
  end
  q = zqueued[PENDING]
  if q then
    q[#q + 1] = pdlS
    q[#q + 1] = member
  else
    zqueue(PENDING, pdlS, member)
  end
end
