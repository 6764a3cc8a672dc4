-- The order record codec (orderrec.go, the layout and its rule): every
-- script reads an order record with order_get(key) (either layout, a
-- table of field -> string; nil when the key does not exist) or, when it
-- needs no more than the status, the moved mark and the token,
-- order_head(key); and writes one with order_put(key, t, ttl) (the packed
-- layout; the TTL kept when ttl is nil, else set to ttl seconds, as EXPIRE
-- would; it returns the value written). order_unpack(v) decodes a packed
-- value. Numbers in t are written as integers.

local OF = {'token', 'created', 'deadline', 'digest', 'parts', 'user', 'lease', 'reserved_at', 'reason', 'decided_at', 'moved'}
local OSC = {reserving = 'b', staging = 's', reserved = 'r', confirmed = 'c', cancelled = 'x', failed = 'f'}
local OREL = {deadline = true, lease = true, reserved_at = true, decided_at = true}
-- the integer v holds when it is written canonically with at most 15
-- digits (so every sum and difference of two is exact in a Lua number)
local function order_int(v)
  if v == '0' then return 0 end
  local d = string.match(v, '^%-?([1-9]%d*)$')
  if d and #d <= 15 then return tonumber(v) end
end
local function order_corrupt(v, why)
  error({err = 'SHARDIS_CORRUPT order record ' .. string.format('%q', v) .. ': ' .. why})
end
local function order_unpack(v)
  local t, c = {}, string.sub(v, 1, 1)
  local pos = 2
  t.status = OSD[c]
  if not t.status then
    if c ~= '=' and c ~= '+' then order_corrupt(v, 'no status code') end
    local j = string.find(v, '\029', 2, true) or #v + 1
    local st = string.sub(v, 2, j - 1)
    if st ~= '' then t.status = st end
    pos = j + 1
  end
  local created
  for _, name in ipairs(OF) do
    if pos > #v + 1 then break end
    local j = string.find(v, '\029', pos, true)
    j = j or #v + 1
    local r = string.sub(v, pos, j - 1)
    pos = j + 1
    if r ~= '' then
      if name == 'created' then
        created = order_int(r)
      elseif OREL[name] then
        if string.sub(r, 1, 1) == '=' then
          r = string.sub(r, 2)
        else
          local d = order_int(r)
          if not (d and created) then order_corrupt(v, name .. ' is no offset from created') end
          r = I(created + d)
        end
      elseif name == 'parts' then
        local b = string.byte(r, 1)
        if b == 30 then r = '~' .. (t.token or '') .. r
        elseif r == '~' then r = '~' .. (t.token or '')
        elseif b == 61 then r = string.sub(r, 2) end
      end
      t[name] = r
    end
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
local function order_put(key, t, ttl)
  local st, moved = t.status or '', t.moved
  moved = moved ~= nil and moved ~= ''
  local head = OSC[st]
  if head then
    if moved then head = string.upper(head) end
  else
    head = (moved and '+' or '=') .. st .. '\029'
  end
  local out, last, created = {}, 0, nil
  for i, name in ipairs(OF) do
    local v = t[name]
    if type(v) == 'number' then v = I(v) end
    if v and v ~= '' then
      if name == 'created' then
        created = order_int(v)
      elseif OREL[name] then
        local n = created and order_int(v)
        if n then v = I(n - created) else v = '=' .. v end
      elseif name == 'parts' then
        local pre = '~' .. (t.token or '')
        local rest = string.sub(v, #pre + 1)
        if string.sub(v, 1, #pre) == pre and (rest == '' or string.byte(rest, 1) == 30) then
          if rest == '' then v = '~' else v = rest end
        elseif v == '~' or string.byte(v, 1) == 30 or string.byte(v, 1) == 61 then
          v = '=' .. v
        end
      end
      out[i], last = v, i
    else
      out[i] = ''
    end
  end
  local s = head .. table.concat(out, '\029', 1, last)
  if ttl and ttl > 0 then
    redis.call('SET', key, s, 'EX', I(ttl))
  else
    redis.call('SET', key, s, 'KEEPTTL')
    if ttl then redis.call('EXPIRE', key, I(ttl)) end
  end
  return s
end
