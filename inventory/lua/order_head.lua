-- The head of an order record (orderrec.go, the layout and its rule):
-- order_head(key, tok) is its status (nil when the key does not exist or
-- the record has none), whether it carries a moved mark, and, when tok is
-- true, its token (nil when none), read from the first bytes of a packed
-- record, no decode (or with HMGET from a record in the hash layout of the
-- releases before).
-- order_status(b) is the status whose code is byte b (either case), nil
-- for none. Part of the prelude library (lualib.go) and of peekScript;
-- no table is built here, so a script that does not use them pays next
-- to nothing for their definitions.
local function order_status(b)
  if b >= 97 then b = b - 32 end
  if b == 82 then return 'reserved' elseif b == 83 then return 'staging' elseif b == 67 then return 'confirmed'
  elseif b == 88 then return 'cancelled' elseif b == 70 then return 'failed' elseif b == 66 then return 'reserving' end
end
-- order_lead(v) is packed value v's status (nil for none), the position
-- of its first field, and its first byte; the position is nil when v
-- starts with neither a status code nor '=' / '+' (a status of no code,
-- literal up to the first GS)
local function order_lead(v)
  local b = string.byte(v, 1) or 0
  local st = order_status(b)
  if st then return st, 2, b end
  if b ~= 61 and b ~= 43 then return nil, nil, b end
  local j = string.find(v, '\029', 2, true) or #v + 1
  st = string.sub(v, 2, j - 1)
  if st == '' then st = nil end
  return st, j + 1, b
end
local function order_head(key, tok)
  local v = redis.pcall('GET', key)
  if not v then return nil, false, nil end
  if type(v) == 'table' then
    -- WRONGTYPE: a record in the hash layout of the releases before
    local f = redis.call('HMGET', key, 'status', 'moved', 'token')
    return f[1] or nil, f[2] ~= false, f[3] or nil
  end
  local st, pos, b = order_lead(v)
  if not pos then
    return error({err = 'SHARDIS_CORRUPT order record ' .. key .. ' holds no status code'})
  end
  local moved = b == 43 or (b >= 65 and b <= 90)
  if not tok then return st, moved end
  local j = string.find(v, '\029', pos, true) or #v + 1
  local token = string.sub(v, pos, j - 1)
  if token == '' then token = nil end
  return st, moved, token
end
-- order_listed(key) is whether the record at key lists parts (its parts
-- field, the fifth of a packed value, is not empty).
local function order_listed(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then return (redis.call('HGET', key, 'parts') or '') ~= '' end
  if not v then return false end
  local _, pos = order_lead(v)
  for _ = 1, 4 do
    pos = pos and string.find(v, '\029', pos, true)
    if not pos then return false end
    pos = pos + 1
  end
  local b = string.byte(v, pos)
  return b ~= nil and b ~= 29
end
-- order_kept(key) is whether the order at key has a record to keep: one
-- that is not a failed attempt's and carries no moved mark (the local
-- reserve replaces those: lua/local.lua). A failed record that lists
-- parts (a one-round attempt's promised list) is kept too: the cancels
-- after its fail may never have landed, and only the general path's
-- begin, which hands them back to be cancelled, may replace it
-- (order_ops.go, settleReplaced). A function of the library, not a
-- closure per call.
local function order_kept(key)
  local status, moved = order_head(key)
  return status and not moved and (status ~= 'failed' or order_listed(key))
end
-- order_stage_head(key, takeover, tok) is the order's record at key as
-- the one-round stage sees it (lua/stage_take.lua): none when it is
-- marked moved by a topology change (migrate.go: dead here, so deleted),
-- else its status and token; and whether the stage takes it over: when
-- takeover is asked (the fault hook's test-only mutation) and it is a
-- failed record of a token other than tok. A function of the library,
-- not a closure per call.
local function order_stage_head(key, takeover, tok)
  local status, moved, token = order_head(key, true)
  if moved then
    redis.call('DEL', key)
    status, token = nil, nil
  end
  return status, token, takeover and status == 'failed' and token ~= tok
end
-- stage_tok(short, head, tok5) is the stage's token (lua/stage_take.lua):
-- tok5, its ARGV[5], in the general layout; in a short one, what the
-- record's first piece, head, holds between its status code and its GS
-- (appendOrderHead), which the call does not send again.
local function stage_tok(short, head, tok5)
  if not short then return tok5 end
  return string.sub(head, 2, -2)
end
