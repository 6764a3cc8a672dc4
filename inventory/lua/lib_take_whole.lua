
local function plan_parts(kb, ab, user, offsets)
  local np = (#KEYS - kb + 1) / 3
  local avail, resv, held, plan, nq = {}, {}, {}, {}, {}
  for i = 0, np - 1 do
    local a = ab + i * 5
    local p = {pk = KEYS[kb + i * 3], ck = KEYS[kb + 1 + i * 3], xk = KEYS[kb + 2 + i * 3], id = ARGV[a], kind = ARGV[a + 1],
               want = tonumber(ARGV[a + 2]), ra = ARGV[a + 3], rb = ARGV[a + 4]}
    if redis.call('EXISTS', p.pk) == 1 then return nil end
    local err
    if p.kind == 's' then
      if avail[p.ck] == nil then
        avail[p.ck], err = stock_int(p.ck, 1, ' available')
        if err then return nil, err end
        resv[p.ck], err = stock_int(p.ck, 3, ' reserved')
        if err then return nil, err end
      end
      local _, oerr = offsets_ok(offsets, p.xk)
      if oerr then return nil, oerr end
      nq[p.xk] = (nq[p.xk] or 0) + 1
      redo_ok(offsets, p.xk, nq[p.xk]) -- its redo segment must be a sorted set
      local limit
      limit, err = stock_int(p.ck, 2, ' limit')
      if err then return nil, err end
      if avail[p.ck] < p.want or (limit > 0 and user == '') then return nil, nil, true end
      avail[p.ck], resv[p.ck] = avail[p.ck] - p.want, resv[p.ck] + p.want
      p.avail, p.resv = avail[p.ck], resv[p.ck] -- the hash's values once this part is taken
    else
      local limit
      limit, err = int(redis.call('HGET', p.xk, 'limit'), p.xk, ' limit')
      if err then return nil, err end
      if held[p.ck] == nil then
        held[p.ck], err = int(redis.call('GET', p.ck), p.ck)
        if err then return nil, err end
      end
      -- over the limit: the caller weighs what the user holds (limitMayBeOwn)
      if limit > 0 and held[p.ck] + p.want > limit then return nil, nil, false, {i + 1, held[p.ck], limit} end
      held[p.ck] = held[p.ck] + p.want
    end
    plan[#plan + 1] = p
  end
  return plan
end
local function write_parts(plan, pending, offsets, pdl)
  local offs, pdlS = {}, I(pdl)
  for _, p in ipairs(plan) do
    local off, member = 0, p.id
    if p.kind == 's' then
      -- absolute values from the plan into the script call's copy of the
      -- hash (stock_set: flush writes it once; the script is atomic)
      stock_set(p.ck, p.avail, p.resv)
      off = next_offset(offsets, p.xk)
      zadd_later(redo_seg(p.xk, off), I(off), p.id)
      member = pend_pos(p.xk, off)
    else
      redis.call('INCRBY', p.ck, I(p.want))
    end
    part_new(p.pk, p.ra, p.rb, p.want, off, pdlS)
    zadd_later(pending, pdlS, member)
    offs[#offs + 1] = off
  end
  return offs
end
