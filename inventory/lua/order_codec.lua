-- The order record codec (orderrec.go, the layout and its rule): every
-- script reads an order record with order_get(key) (either layout, a
-- table of field -> string; nil when the key does not exist) or, when it
-- needs no more than the status, the moved mark and the token,
-- order_head(key); and writes one with order_put(key, t, ttl) (the packed
-- layout; the TTL kept when ttl is nil, else set to ttl seconds, as EXPIRE
-- would; it returns the value written) or order_write (the same, the
-- fields as arguments). order_unpack(v) decodes a packed value. Numbers
-- (created and the time fields only) are written as integers. The fields are spelled
-- out, not looped over a table of names: a table built in a definition
-- would cost every call of every script that carries it.

-- the integer string v holds when it is written canonically with at most
-- 15 digits (so every sum and difference of two is exact in a Lua
-- number), else nil
local function order_int(v)
  local n = tonumber(v)
  if n and n > -1e15 and n < 1e15 and string.format('%d', n) == v then return n end
end
-- v as a string (a number as an integer)
local function order_s(v)
  if type(v) == 'number' then return I(v) end
  return v
end
local function order_corrupt(v, why)
  return error({err = 'SHARDIS_CORRUPT order record ' .. string.format('%q', v) .. ': ' .. why})
end
-- the stored form of time field v, created the number of the record's
-- created field (nil when it has none)
local function order_rel(v, created)
  if not v or v == '' then return '' end
  if type(v) == 'number' then
    if created and v > -1e15 and v < 1e15 and v == math.floor(v) then return I(v - created) end
    v = I(v)
  end
  local n = created and order_int(v)
  if n then return I(n - created) end
  return '=' .. v
end
local function order_unrel(v, r, created, name)
  if r == '' then return nil end
  if string.byte(r, 1) == 61 then return string.sub(r, 2) end
  local d = order_int(r)
  if not (d and created) then order_corrupt(v, name .. ' is no offset from created') end
  return I(created + d)
end
local function order_unpack(v)
  local st, pos = order_lead(v)
  if not pos then order_corrupt(v, 'no status code') end
  local a, n = {}, 0
  for f in string.gmatch(string.sub(v, pos) .. '\029', '([^\029]*)\029') do
    n = n + 1
    a[n] = f
  end
  for i = n + 1, 11 do a[i] = '' end
  local t = {status = st}
  local function s(x) if x ~= '' then return x end end
  t.token, t.created, t.digest, t.user, t.reason, t.moved = s(a[1]), s(a[2]), s(a[4]), s(a[6]), s(a[9]), s(a[11])
  local created = order_int(a[2])
  t.deadline, t.lease = order_unrel(v, a[3], created, 'deadline'), order_unrel(v, a[7], created, 'lease')
  t.reserved_at, t.decided_at = order_unrel(v, a[8], created, 'reserved_at'), order_unrel(v, a[10], created, 'decided_at')
  local p = a[5]
  if p ~= '' then
    local pb = string.byte(p, 1)
    if pb == 30 then p = '~' .. a[1] .. p
    elseif p == '~' then p = '~' .. a[1]
    elseif pb == 61 then p = string.sub(p, 2) end
    t.parts = p
  end
  return t
end
local function order_get(key)
  local v = redis.pcall('GET', key)
  if not v then return nil end
  if type(v) == 'table' then
    -- WRONGTYPE: a record in the hash layout of the releases before
    local h = redis.call('HGETALL', key)
    local t = {}
    for i = 1, #h, 2 do t[h[i]] = h[i + 1] end
    return t
  end
  return order_unpack(v)
end
-- order_pack(p, tok): parts list p (as order_unpack gives it) as a
-- record of token tok stores it: a layout-2 list of that token without
-- its mark and token, a literal one after '='.
local function order_pack(p, tok)
  p = p or ''
  if p ~= '' then
    local np = #tok + 1
    if string.byte(p, 1) == 126 and (np == 1 or string.find(p, tok, 2, true) == 2) and
      (#p == np or string.byte(p, np + 1) == 30) then
      if #p == np then p = '~' else p = string.sub(p, np + 1) end
    elseif p == '~' or string.byte(p, 1) == 30 or string.byte(p, 1) == 61 then
      p = '=' .. p
    end
  end
  return p
end
-- order_write(key, ttl, status, token, created, deadline, digest, parts,
-- user, lease, reserved_at, reason, decided_at, moved) is order_put with
-- the fields as arguments (nil or '' for none), no table: the scripts
-- that write a new record call it
local function order_write(key, ttl, st, tok, cr, dl, dg, p, user, lease, rat, reason, dat, moved)
  st, tok, cr, moved = st or '', tok or '', cr or '', moved or ''
  local created
  if type(cr) == 'number' and cr > -1e15 and cr < 1e15 and cr == math.floor(cr) then
    created, cr = cr, I(cr)
  else
    cr = order_s(cr)
    created = cr ~= '' and order_int(cr) or nil
  end
  local head
  if st == 'reserved' then head = 'r' elseif st == 'staging' then head = 's' elseif st == 'confirmed' then head = 'c'
  elseif st == 'cancelled' then head = 'x' elseif st == 'failed' then head = 'f' elseif st == 'reserving' then head = 'b' end
  if head then
    if moved ~= '' then head = string.upper(head) end
  else
    head = (moved ~= '' and '+' or '=') .. st .. '\029'
  end
  p = order_pack(p, tok)
  -- every field but created and the time fields is a string (or nil);
  -- empty trailing fields left out
  local s = head .. tok .. '\029' .. cr .. '\029' .. order_rel(dl, created) .. '\029' .. (dg or '') .. '\029' .. p ..
    '\029' .. (user or '') .. '\029' .. order_rel(lease, created) .. '\029' .. order_rel(rat, created) .. '\029' ..
    (reason or '') .. '\029' .. order_rel(dat, created) .. '\029' .. moved
  local n, h = #s, #head
  while n > h and string.byte(s, n) == 29 do n = n - 1 end
  if n < #s then s = string.sub(s, 1, n) end
  set_value(key, s, ttl)
  return s
end
local function order_put(key, t, ttl)
  return order_write(key, ttl, t.status, t.token, t.created, t.deadline, t.digest, t.parts, t.user, t.lease,
    t.reserved_at, t.reason, t.decided_at, t.moved)
end
-- order_commit_staged(key, tok, packed) commits the staging record of
-- attempt tok at key with the parts list whose stored form is packed
-- (order_pack's, or packOrderParts' in Go), without decoding it: the
-- record order_put would write for it (status reserved, those parts,
-- reserved_at now, every other field as it was, no TTL) is the stored
-- value with its status code and parts field replaced and reserved_at
-- added. It does so, and returns the record's created (ms), deadline and
-- lease (as stored: ms after created), only for a value that is exactly a
-- staging record of tok (not moved, in the packed layout) whose fields end
-- at lease, with created, deadline and lease canonical integers within
-- order_int's bounds (a stage writes nothing else: stageTakeScript); for
-- any other it writes nothing and returns nil, and the caller decodes the
-- record as for every op.
local function order_commit_staged(key, tok, packed)
  local v = redis.pcall('GET', key)
  if type(v) ~= 'string' or string.byte(v, 1) ~= 115 then return nil end
  local h = #tok + 2
  if string.sub(v, 2, h - 1) ~= tok or string.byte(v, h) ~= 29 then return nil end
  -- the fields after the token in one match (one C call, where a find per
  -- field and a format per integer were a dozen): created, deadline,
  -- digest, parts, user and lease, and nothing after lease; the integers
  -- canonical and not 0 (the pattern), within order_int's bounds (below).
  -- A value it refuses (an integer 0, say) takes the caller's way: the
  -- match accepts no value order_int's checks would refuse.
  local cr, dlS, dg, user, leaseS = string.match(v,
    '^(%-?[1-9]%d*)\029(%-?[1-9]%d*)\029([^\029]*)\029[^\029]*\029([^\029]*)\029(%-?[1-9]%d*)$', h + 1)
  if not cr then return nil end
  -- within the bounds: a canonical integer of at most 15 digits, told by
  -- its length (a tonumber is a strtod: about 1,100 instructions), but
  -- created, which reserved_at is counted from
  if not ((#dlS < 16 or #dlS == 16 and string.byte(dlS, 1) == 45) and
      (#leaseS < 16 or #leaseS == 16 and string.byte(leaseS, 1) == 45)) then
    return nil
  end
  local created = tonumber(cr)
  if not (created < 1e15 and created > -1e15) then return nil end
  redis.call('SET', key, 'r' .. tok .. '\029' .. cr .. '\029' .. dlS .. '\029' .. dg .. '\029' .. packed ..
    '\029' .. user .. '\029' .. leaseS .. '\029' .. I(now - created))
  return created, dlS, leaseS
end
-- reserved_at_of(createdS): I(now - created), kept for the last
-- createdS (memo): the carried commits of a group mostly come from the
-- stages of one earlier script call, of one created, and a tonumber is a
-- strtod (about 1,100 instructions), a format about 1,000. It reads now,
-- so it is made afresh per script call.
local reserved_at_of = memo(function(createdS) return I(now - tonumber(createdS)) end)
-- order_commit_exact(key, staged, prefix, createdS) is a carried
-- commit's (carry.go): when the value at key is exactly staged, the
-- staging record the caller's stage wrote (created createdS), it writes
-- prefix and reserved_at (now - created), which is the record
-- order_commit_staged writes for it (stagedCommitValues builds both,
-- TestCommitExactAsSpliced holds them together), and returns true; else it
-- writes nothing and returns nil. Lua interns strings, so the comparison
-- is of two references: the GET's reply is the argument already
-- interned. It reads and splices nothing (order_commit_staged's match, its
-- bounds and its concatenation of nine pieces cost the node about 9,000
-- instructions).
local function order_commit_exact(key, staged, prefix, createdS)
  if redis.pcall('GET', key) ~= staged then return nil end
  redis.call('SET', key, prefix .. reserved_at_of(createdS))
  return true
end
