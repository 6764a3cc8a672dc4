-- stock_settle_check(counter, pk, q, confirm, short) is nil when stock
-- hash counter can give up q units of its reserved for part pk (key), to
-- confirmed when confirm is true, else to available; otherwise the error
-- reply why, before any write: SHARDIS_CORRUPT for a key that is no hash,
-- a counter that is no integer or one beyond the counters' range,
-- SHARDIS_NOSTOCK for a hash that does not exist (deleted) while the part
-- holds units of it, and the code short (settle.lua: SHARDIS_CORRUPT; an
-- operator's quantity, stuck_settle_lost.lua: SHARDIS_RANGE) for a
-- reserved below q. Every settle of a stock part checks by it first
-- (settle.lua, stuck_settle_lost.lua), then part_settle writes. claimed
-- (nil: none) is what a script that settles several parts has checked
-- before this one, counter key to units: the parts of one script that
-- share a counter (two items of one SKU) are checked together, their sum
-- against reserved, not each alone (a reserved of 4 passed parts of 2 and
-- 3 one by one, and the settle took 5); on success q is added to it.
local function stock_settle_check(counter, pk, q, confirm, short, claimed)
  -- pcall: a counter that is not a hash is refused naming its key
  -- (WRONGTYPE alone would not name it)
  local r = redis.pcall('HGET', counter, 'reserved')
  if type(r) == 'table' then
    return redis.error_reply('SHARDIS_CORRUPT stock hash ' .. counter .. ' of part ' .. pk .. ' is not a hash (' ..
      tostring(r.err) .. ')')
  end
  local err
  r, err = int(r, counter .. ' reserved')
  if err then return err end
  local before = claimed and claimed[counter] or 0
  if r - before < q then
    if redis.call('EXISTS', counter) == 0 then
      return redis.error_reply('SHARDIS_NOSTOCK stock hash ' .. counter .. ' is missing (deleted?) while part ' .. pk ..
        ' holds ' .. q .. ' of it')
    end
    local also = before > 0 and (' and parts settled with it ' .. before) or ''
    return redis.error_reply(short .. ' ' .. counter .. ' reserved is ' .. r .. ', part ' .. pk .. ' holds ' .. q .. also)
  end
  local to = confirm and 'confirmed' or 'available'
  local tn, terr = int(redis.call('HGET', counter, to), counter .. ' ' .. to)
  if terr then return terr end
  -- refused before any write, not raised by HINCRBY after the first
  -- (reserved then less the part's units, the part still pending)
  if r > 2 ^ 62 or tn > 2 ^ 62 or tn < -2 ^ 62 then
    return redis.error_reply('SHARDIS_CORRUPT ' .. counter .. ' reserved ' .. r .. ' or ' .. to .. ' ' .. tn ..
      ' is beyond the counters\' range (part ' .. pk .. ')')
  end
  if claimed then claimed[counter] = before + q end
end
-- quota_settle_check(counter, pk, q, short) is nil when user count
-- counter holds at least the q units of quota part pk (key); otherwise
-- the error reply why, before any write: SHARDIS_CORRUPT for a key that
-- is no string or a count that is no integer, and the code short
-- (settle.lua: SHARDIS_CORRUPT; an operator's quantity,
-- stuck_settle_lost.lua: SHARDIS_RANGE) for a count below q (a count the
-- part no longer holds: the key deleted, another user's, a copy's),
-- refused rather than taken off another part's count. claimed is as
-- stock_settle_check's: the quota parts of one script that share a count
-- are checked together.
local function quota_settle_check(counter, pk, q, short, claimed)
  local v = redis.pcall('GET', counter)
  if type(v) == 'table' then
    return redis.error_reply('SHARDIS_CORRUPT quota counter ' .. counter .. ' of part ' .. pk .. ' is not a string (' ..
      tostring(v.err) .. ')')
  end
  local held, err = int(v, counter)
  if err then return err end
  local before = claimed and claimed[counter] or 0
  if held - before < q then
    local also = before > 0 and (' and parts settled with it ' .. before) or ''
    return redis.error_reply(short .. ' quota counter ' .. counter .. ' is ' .. held .. ', part ' .. pk .. ' holds ' .. q .. also)
  end
  if claimed then claimed[counter] = before + q end
end
-- part_settle(pk, id, p, q, confirm, retention) settles the pending part
-- record p (part_get's table) of part id at key pk, which holds q units:
-- confirmed when confirm is true, else cancelled. A stock part's units
-- move from its counter's reserved to confirmed or available, a quota
-- part's units leave its counter on a cancel; its record is written
-- settled (part_put, which logs it in the settled log), living retention
-- seconds from when it comes due, so it lives as long as the decided order
-- record's retention at least (a record a retried decision relied on
-- lives longer: order.go's partsMayHaveExpired tells a part expired from
-- one lost); its
-- pending-index entry goes, and its stuck-index entries whatever its
-- record says. The caller checked the counter first, and that the part's kind
-- is s (stock) or q (quota): any other is refused before any write
-- (settle.lua, and inline_settle for a decision's inline parts): this
-- only writes.
local function part_settle(pk, id, p, q, confirm, retention)
  if p.kind == 's' then
    redis.call('HINCRBY', p.counter, 'reserved', I(-q))
    redis.call('HINCRBY', p.counter, confirm and 'confirmed' or 'available', I(q))
  elseif p.kind == 'q' and not confirm then
    if redis.call('DECRBY', p.counter, I(q)) <= 0 then redis.call('DEL', p.counter) end
  end
  local state = confirm and 'confirmed' or 'cancelled'
  p.state = state
  p.settled_at = nowS
  local dl = tonumber(p.deadline) or 0
  part_put(pk, p, retention + math.max(0, math.ceil((dl - now) / 1000)))
  redis.call('ZREM', PENDING, pend_member(id, p), id)
  -- it leaves the stuck index too, so a part listed there after its
  -- record expired is one that never settled (stuck_retry.lua,
  -- SettleStuckLost). Looked up by its id, not by stuck_since: a part
  -- set aside while its record was gone or unreadable has none (the
  -- stuck op could not write it), nor has a record an operator repaired
  -- or restored, nor an inline part (part_get's, inline_write's); an
  -- entry left behind the settle outlived the settled record and read as
  -- a lost record's, which SettleStuckLost settled a second time
  if redis.call('ZREM', 'inv:stuck', id) == 1 or p.stuck_since then
    redis.call('HDEL', 'inv:stuck:why', id)
    redis.call('ZREM', 'inv:stuck:retry', id)
  end
end
