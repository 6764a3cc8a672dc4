-- The part record codec (partrec.go, the layout and its rule): every
-- script reads a part record with part_get(key) (either layout, a table of
-- field -> string; nil when the key does not exist) and writes one with
-- part_put(key, t, ttl) (the packed layout; the TTL kept when ttl is nil,
-- else set to ttl seconds, as EXPIRE would). Numbers in t are written as
-- integers.

local PF = {'state', 'kind', 'qty', 'offset', 'redo', 'counter', 'sku', 'item', 'order', 'token', 'deadline', 'at', 'settled_at', 'tombstone', 'held', 'moved', 'stuck_since', 'stuck_tries'}
local PSC, PSD = {pending = 'p', confirmed = 'c', cancelled = 'x'}, {p = 'pending', c = 'confirmed', x = 'cancelled'}
local PFX_STOCK, PFX_QUOTA, PFX_REDO = 'inv:stock:', 'inv:quota:', 'inv:redo:'
local function cut_prefix(v, pre)
  if string.sub(v, 1, #pre) == pre then return string.sub(v, #pre + 1) end
end
-- the SKU a stock key names (what follows the route), or nil
local function stock_key_sku(counter)
  local rest = counter and cut_prefix(counter, PFX_STOCK)
  local j = rest and string.find(rest, ':', 1, true)
  if j then return string.sub(rest, j + 1) end
end
local function part_ref(name, v, id, t)
  if name == 'state' then
    if PSC[v] then return PSC[v] end
  elseif name == 'redo' then
    local q = cut_prefix(v, PFX_REDO)
    if q and q ~= '' and string.sub(q, 1, 1) ~= '=' then return q end
  elseif name == 'counter' then
    local r = cut_prefix(v, PFX_STOCK)
    if r then return 's' .. r end
    r = cut_prefix(v, PFX_QUOTA)
    if r then return 'q' .. r end
  elseif name == 'sku' then
    if stock_key_sku(t.counter) == v then return '^' end
  elseif name == 'item' then
    if string.sub(id, -#v - 1) == '|' .. v and not string.find(v, '|', 1, true) then return '^' end
  elseif name == 'order' then
    if string.sub(id, 1, #v) == v then return I(#v) end
  elseif name == 'token' then
    local b = #(t.order or '') + 2
    if string.sub(id, b, b + #v - 1) == v then return I(#v) end
  else
    return v
  end
  return '=' .. v
end
local function part_deref(name, r, id, t)
  if name == 'state' or name == 'redo' or name == 'counter' or name == 'sku' or name == 'item' or
     name == 'order' or name == 'token' then
    if string.sub(r, 1, 1) == '=' then return string.sub(r, 2) end
  else
    return r
  end
  if name == 'state' then return PSD[r]
  elseif name == 'redo' then return PFX_REDO .. r
  elseif name == 'counter' then
    local k = string.sub(r, 1, 1)
    if k == 's' then return PFX_STOCK .. string.sub(r, 2) elseif k == 'q' then return PFX_QUOTA .. string.sub(r, 2) end
  elseif name == 'sku' then return stock_key_sku(t.counter)
  elseif name == 'item' then return string.match(id, '[^|]*$')
  elseif name == 'order' then return string.sub(id, 1, tonumber(r))
  elseif name == 'token' then
    local b = #(t.order or '') + 2
    return string.sub(id, b, b + tonumber(r) - 1)
  end
end
local function part_get(key)
  local v = redis.pcall('GET', key)
  if not v then return nil end
  local t = {}
  if type(v) == 'table' then
    -- WRONGTYPE: a record in the hash layout of the releases before
    local h = redis.call('HGETALL', key)
    for i = 1, #h, 2 do t[h[i]] = h[i + 1] end
    return t
  end
  local id, pos = string.sub(key, #partPrefix + 1), 1
  for _, name in ipairs(PF) do
    if pos > #v + 1 then break end
    local j = string.find(v, '\031', pos, true)
    local r = string.sub(v, pos, (j or #v + 1) - 1)
    pos = (j or #v + 1) + 1
    if r ~= '' then t[name] = part_deref(name, r, id, t) end
  end
  return t
end
local function part_put(key, t, ttl)
  local id, out, last = string.sub(key, #partPrefix + 1), {}, 0
  for i, name in ipairs(PF) do
    local v = t[name]
    if type(v) == 'number' then v = I(v) end
    if v and v ~= '' then
      out[i], last = part_ref(name, v, id, t), i
    else
      out[i] = ''
    end
  end
  local s = table.concat(out, '\031', 1, last)
  if ttl and ttl > 0 then
    redis.call('SET', key, s, 'EX', I(ttl))
  else
    redis.call('SET', key, s, 'KEEPTTL')
    if ttl then redis.call('EXPIRE', key, I(ttl)) end
  end
end
