
local op = ARGV[4]
if op == 'ack' then
  -- ARGV[6], when not '', is the incarnation the consumer read at: at
  -- another one nothing is acknowledged (redo_ack_batch.lua's fence)
  local inc = redis.call('HGET', KEYS[1], 'incarnation') or ''
  if (ARGV[6] or '') ~= '' and ARGV[6] ~= inc then
    return redis.error_reply(string.format('SHARDIS_INCARNATION node is at incarnation %q, the acknowledgement is for %q', inc, ARGV[6]))
  end
  -- the head and the acknowledged offset checked as redo_ack_batch.lua
  -- checks them (not an integer: corrupt); the head named by I, not by
  -- Lua's %.14g (which prints 2^53 - 1 as 9.007199254741e+15)
  local head, err = int(redis.call('HGET', KEYS[3], KEYS[4]), KEYS[3] .. ' ' .. KEYS[4])
  if err then return err end
  local cur, aerr = int(redis.call('HGET', KEYS[2], KEYS[4]), KEYS[2] .. ' ' .. KEYS[4])
  if aerr then return aerr end
  local off = tonumber(ARGV[5])
  if off > head then
    return redis.error_reply('SHARDIS_RANGE ack offset ' .. ARGV[5] .. ' is past the head of ' .. KEYS[4] .. ' (last offset handed out ' .. I(head) .. ')')
  end
  if not redo_acks_current(KEYS[2], KEYS[1]) then cur = 0 end
  -- ARGV[7], when not '', is the part the consumer landed at the offset:
  -- a queue that no longer holds it there went back under it
  -- (redo_holds, redo_ack_batch.lua's rule)
  local holds, at = redo_holds(KEYS[4], off, ARGV[7] or '', cur)
  if not holds then return redo_rewound_reply(KEYS[4], ARGV[5], at, ARGV[7]) end
  redo_acks_own(KEYS[2], inc)
  if off > cur then redis.call('HSET', KEYS[2], KEYS[4], off) return off end
  return cur
elseif op == 'trim' then
  -- full: 1 once a queue had a whole batch removed without meeting an
  -- entry that must stay (it may hold more that may go)
  local maxAge, batch, removed, full = tonumber(ARGV[5]), tonumber(ARGV[6]), 0, 0
  -- trim_key(xk, key, acked, left): removes from the lowest of the
  -- entries of queue xk in key (at most left) those that may go; returns
  -- how many it removed and whether it stopped at one that may not.
  local function trim_key(xk, key, acked, left)
    local e, n = redis.call('ZRANGE', key, 0, left - 1, 'WITHSCORES'), 0
    for i = 1, #e, 2 do
      -- a record that cannot be read stops the queue's trim there: its
      -- part may be pending, and its entry stays for a consumer to report
      -- (never read as a part gone, whose entry may go)
      local p, bad = part_try(partPrefix .. e[i])
      if bad then return n, true end
      -- a record gone while the part is listed undecided (the pending
      -- index holds its place or id, or the stuck index its id:
      -- pend_listed), or a tombstone written over it (pend_lost), is a
      -- pending part whose record was lost, not one settled: its entry is how the index names it, so the expiry sets
      -- it aside with its units reserved, and a retry after a repair puts
      -- it back under its place; without the entry the place names no
      -- part and is dropped, the units reserved for good (redolog.go,
      -- "What a trim removes")
      if pend_lost(p, xk, I(tonumber(e[i + 1])), e[i]) then return n, true end
      p = p or {}
      local f = {p.state or false, p.at}
      local settled = f[1] == false or f[1] == 'confirmed' or f[1] == 'cancelled'
      local old = maxAge > 0 and (f[1] == false or (tonumber(f[2]) or 0) + maxAge <= now)
      if not settled or not (tonumber(e[i + 1]) <= acked or old) then return n, true end
      redis.call('ZREM', key, e[i])
      n = n + 1
    end
    return n, false
  end
  -- every queue's acknowledged offset, head and first segment offset,
  -- read and checked before any entry goes (as the ack op and
  -- redo_read.lua check them: not an integer is corrupt, never 0, and a
  -- refused trim removes nothing)
  local current, q = redo_acks_current(KEYS[2], KEYS[1]), {}
  for k = 4, #KEYS do
    local xk, acked, head, first, err = KEYS[k], 0
    if current then
      acked, err = int(redis.call('HGET', KEYS[2], xk), KEYS[2] .. ' ' .. xk)
      if err then return err end
    end
    head, err = int(redis.call('HGET', KEYS[3], xk), KEYS[3] .. ' ' .. xk)
    if err then return err end
    first, err = redo_first(KEYS[3], xk)
    if err then return err end
    q[k] = {acked, head, first}
  end
  for k = 4, #KEYS do
    local xk, acked, head, first = KEYS[k], q[k][1], q[k][2], q[k][3]
    -- the entries still in the queue key itself first: all below the
    -- segments' (redo_log.lua)
    local n, stopped = trim_key(xk, xk, acked, batch)
    local left = batch - n
    removed = removed + n
    if not stopped and left > 0 then
      -- each kind of segment's run, from its lowest segment left up
      for _, g in ipairs(redo_gens(head, first)) do
        local s = redo_low(xk, g, 0)
        while s and not stopped and left > 0 and s <= g[3] do
          n, stopped = trim_key(xk, g[1](xk, s), acked, left)
          left, removed = left - n, removed + n
          s = s + 1
        end
        if stopped or left <= 0 then break end
      end
    end
    if not stopped and left <= 0 then full = 1 end
  end
  return {removed, full}
end
return redis.error_reply('SHARDIS_BADOP ' .. tostring(op))
