-- The head of an order record (orderrec.go, the layout and its rule):
-- order_head(key) is its status (nil when the key does not exist or the
-- record has none), whether it carries a moved mark, and its token (nil
-- when none), read from the first bytes of a packed record, no decode (or
-- with HMGET from a record in the hash layout of the releases before).
-- Part of the prelude (lua/order_codec.lua) and of peekScript.
local OSD = {b = 'reserving', s = 'staging', r = 'reserved', c = 'confirmed', x = 'cancelled', f = 'failed',
  B = 'reserving', S = 'staging', R = 'reserved', C = 'confirmed', X = 'cancelled', F = 'failed'}
local function order_head(key)
  local v = redis.pcall('GET', key)
  if not v then return nil, false, nil end
  if type(v) == 'table' then
    -- WRONGTYPE: a record in the hash layout of the releases before
    local f = redis.call('HMGET', key, 'status', 'moved', 'token')
    return f[1] or nil, f[2] ~= false, f[3] or nil
  end
  local c = string.sub(v, 1, 1)
  local st, pos = OSD[c], 2
  if not st then
    if c ~= '=' and c ~= '+' then
      error({err = 'SHARDIS_CORRUPT order record ' .. key .. ' holds no status code'})
    end
    -- '=' or '+': a status of no code, literal up to the first GS
    local j = string.find(v, '\029', 2, true) or #v + 1
    st, pos = string.sub(v, 2, j - 1), j + 1
    if st == '' then st = nil end
  end
  local j = string.find(v, '\029', pos, true) or #v + 1
  local tok = string.sub(v, pos, j - 1)
  if tok == '' then tok = nil end
  return st, c == '+' or (c >= 'A' and c <= 'Z'), tok
end
