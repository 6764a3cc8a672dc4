-- The part record codec (partrec.go, the layout and its rule): every
-- script reads a part record with part_get(key) (lua/inline_part.lua:
-- part_read(key), either layout, a table of field -> string, nil when the
-- key does not exist; or an inline part, inline.go) and writes one with
-- part_put(key, t, ttl) (the packed layout; the TTL kept when ttl is nil,
-- else set to ttl seconds, as EXPIRE would). Numbers in t are written as
-- integers.
--
-- Written for the node's CPU (every reserve and settle runs it): one
-- string.match cuts a record into its fields (PPAT, after PPAD makes sure
-- all of them are there), one constructor builds the table, and part_put
-- joins the fields with one concatenation, each field named in the
-- packed layout's order (partFields): the locals of part_read's
-- `local state, kind, …` line and the operands of part_put's join.
local PSC = {pending = 'p', confirmed = 'c', cancelled = 'x'}
local PSD = {p = 'pending', c = 'confirmed', x = 'cancelled'}
-- the first piece of a pending stock part's template (appendPartTemplate:
-- the state's code, US, the kind, US), which a call's short layout leaves
-- out (reserveCall)
local PNEW_STOCK = PSC.pending .. '\031s\031'
local PFX_STOCK, PFX_QUOTA, PFX_REDO = 'inv:stock:', 'inv:quota:', 'inv:redo:'
-- The node's settled log (SettledLogKey, settledlog.go): a stream naming
-- each part that leaves pending, the newest SETTLED_CAP or so kept
local SETTLED_LOG, SETTLED_CAP = 'inv:settled', '100000'
-- 18 fields, each followed by a separator: a record less its empty
-- trailing fields, padded with PPAD, matches PPAT; the fields after the
-- 18th (none are written) are left unread. (One literal: Lua 5.1 would
-- join the pieces of a split one on every call.)
local PPAD = '\031\031\031\031\031\031\031\031\031\031\031\031\031\031\031\031\031\031'
local PPAT = '^([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031'
-- the SKU a stock key names (what follows the route), or nil
local function stock_key_sku(counter)
  if counter and string.sub(counter, 1, #PFX_STOCK) == PFX_STOCK then
    local j = string.find(counter, ':', #PFX_STOCK + 1, true)
    if j then return string.sub(counter, j + 1) end
  end
end
-- A field's stored form r, "" for an absent one: nil, the literal after
-- "=", or false for a reference (the caller decodes it).
local function part_lit(r)
  if r == '' then return nil end
  if string.byte(r) == 61 then return string.sub(r, 2) end
  return false
end
-- part_corrupt(key, why) raises the error of a part record at key that
-- exists but cannot be read: SHARDIS_CORRUPT naming the key and why
-- (ErrCorrupt), never a record read as missing or without a state, which
-- a caller would take for a part gone (expired) or never taken. Bytes
-- that are no printable ASCII in why are written as \ddd. part_try
-- (inline_part.lua) catches it where a script goes on past one record.
local function part_corrupt(key, why)
  why = string.gsub(why, '[%c\128-\255]', function(c) return string.format('\\%03d', string.byte(c)) end)
  error({err = 'SHARDIS_CORRUPT part record ' .. key .. ': ' .. why})
end
local function part_read(key)
  local v = redis.pcall('GET', key)
  if not v then return nil end
  if type(v) == 'table' then
    -- WRONGTYPE: a record in the hash layout of the releases before, or a
    -- key of another type (corrupt: named, where HGETALL's own WRONGTYPE
    -- would not name it)
    local t = {}
    local h = redis.pcall('HGETALL', key)
    if h.err then return part_corrupt(key, 'the key is neither a string nor a hash (' .. h.err .. ')') end
    for i = 1, #h, 2 do t[h[i]] = h[i + 1] end
    return t
  end
  local state, kind, qty, offset, redo, counter, sku, item, order, token, deadline, at, settled_at, tombstone, held,
    moved, stuck_since, stuck_tries = string.match(v .. PPAD, PPAT)
  local id = string.sub(key, #partPrefix + 1)
  local x = part_lit(state)
  if x == false then
    -- a code that is no state: the record is there and cannot be read
    -- (partDeref's "not a state code", in Go); only good records pass
    -- this one test
    x = PSD[state]
    if not x then return part_corrupt(key, 'state code "' .. state .. '" is not one of p, c, x or an =literal') end
  end
  state = x
  x = part_lit(redo)
  if x == false then redo = PFX_REDO .. redo else redo = x end
  x = part_lit(counter)
  if x == false then
    local k = string.sub(counter, 1, 1)
    if k == 's' then counter = PFX_STOCK .. string.sub(counter, 2)
    elseif k == 'q' then counter = PFX_QUOTA .. string.sub(counter, 2)
    else
      -- no counter kind (partDeref's "not a counter reference"): read as
      -- no counter, a settle would give nothing back and a cancel strand
      -- the part's units
      return part_corrupt(key, 'counter reference "' .. counter .. '" does not start with s or q and is no =literal')
    end
  else
    counter = x
  end
  x = part_lit(sku)
  if x == false then sku = stock_key_sku(counter) else sku = x end
  x = part_lit(item)
  if x == false then item = string.match(id, '^.*|(.*)$') or id else item = x end
  x = part_lit(order)
  if x == false then order = string.sub(id, 1, tonumber(order)) else order = x end
  x = part_lit(token)
  if x == false then
    local b = #(order or '') + 2
    token = string.sub(id, b, b + tonumber(token) - 1)
  else
    token = x
  end
  if kind == '' then kind = nil end
  if qty == '' then qty = nil end
  if offset == '' then offset = nil end
  if deadline == '' then deadline = nil end
  if at == '' then at = nil end
  -- sized for the fields of a pending part: the others are rarer
  local t = {state = state, kind = kind, qty = qty, offset = offset, redo = redo, counter = counter, sku = sku,
    item = item, order = order, token = token, deadline = deadline, at = at}
  if settled_at ~= '' then t.settled_at = settled_at end
  if tombstone ~= '' then t.tombstone = tombstone end
  if held ~= '' then t.held = held end
  if moved ~= '' then t.moved = moved end
  if stuck_since ~= '' then t.stuck_since = stuck_since end
  if stuck_tries ~= '' then t.stuck_tries = stuck_tries end
  return t
end
-- A field's value as part_put writes it: a number as an integer, "" for
-- none.
local function part_val(v)
  if type(v) == 'number' then return I(v) end
  return v or ''
end
local function part_put(key, t, ttl)
  local id = string.sub(key, #partPrefix + 1)
  local state, redo, counter, sku, item, order, token =
    part_val(t.state), part_val(t.redo), part_val(t.counter), part_val(t.sku), part_val(t.item), part_val(t.order),
    part_val(t.token)
  if state ~= '' then state = PSC[state] or '=' .. state end
  if redo ~= '' then
    local q = string.sub(redo, #PFX_REDO + 1)
    if string.sub(redo, 1, #PFX_REDO) ~= PFX_REDO or q == '' or string.byte(q) == 61 then q = '=' .. redo end
    redo = q
  end
  if counter ~= '' then
    if string.sub(counter, 1, #PFX_STOCK) == PFX_STOCK then counter = 's' .. string.sub(counter, #PFX_STOCK + 1)
    elseif string.sub(counter, 1, #PFX_QUOTA) == PFX_QUOTA then counter = 'q' .. string.sub(counter, #PFX_QUOTA + 1)
    else counter = '=' .. counter end
  end
  if sku ~= '' then
    if stock_key_sku(t.counter) == sku then sku = '^' else sku = '=' .. sku end
  end
  if item ~= '' then
    if string.sub(id, -#item - 1) == '|' .. item and not string.find(item, '|', 1, true) then item = '^' else item = '=' .. item end
  end
  if token ~= '' then
    local b = #(t.order or '') + 2
    if string.sub(id, b, b + #token - 1) == token then token = I(#token) else token = '=' .. token end
  end
  if order ~= '' then
    if string.sub(id, 1, #order) == order then order = I(#order) else order = '=' .. order end
  end
  local settled_at, tombstone, held, moved, stuck_since, stuck_tries = t.settled_at, t.tombstone, t.held, t.moved,
    t.stuck_since, t.stuck_tries
  local s = state .. '\031' .. part_val(t.kind) .. '\031' .. part_val(t.qty) .. '\031' .. part_val(t.offset) .. '\031' ..
    redo .. '\031' .. counter .. '\031' .. sku .. '\031' .. item .. '\031' .. order .. '\031' .. token .. '\031' ..
    part_val(t.deadline) .. '\031' .. part_val(t.at)
  if settled_at or tombstone or held or moved or stuck_since or stuck_tries then
    s = s .. '\031' .. part_val(settled_at) .. '\031' .. part_val(tombstone) .. '\031' .. part_val(held) .. '\031' ..
      part_val(moved) .. '\031' .. part_val(stuck_since) .. '\031' .. part_val(stuck_tries)
  end
  -- less the empty trailing fields
  local e = #s
  while string.byte(s, e) == 31 do e = e - 1 end
  if e < #s then s = string.sub(s, 1, e) end
  set_value(key, s, ttl)
  -- a part that leaves pending (confirmed, cancelled, expired) is named in
  -- the settled log, a hint for a consumer that lands its state elsewhere
  -- (pgsync); a tombstone never was pending
  if (state == PSC.confirmed or state == PSC.cancelled) and not tombstone then
    redis.call('XADD', SETTLED_LOG, 'MAXLEN', '~', SETTLED_CAP, '*', 'p', id)
  end
end
-- part_new(key, a, b, qty, off, dlS, nx, offS): a new pending part
-- record, written from the template its caller encoded (rectemplate.go,
-- appendPartTemplate: the pieces a and b around the holes QTY US OFFSET
-- and DEADLINE US AT, the last the node's clock), no TTL; offS, when
-- given, is I(off), which the take paths have at hand (one Lua call
-- fewer). With nx it is written only if key is missing, and part_new
-- reports whether it was (a key that is there is left as it is).
-- reserve.lua's one part builds the same value in place (take_whole.lua
-- says why; TestTakeOneAsPlan holds the two together).
local function part_new(key, a, b, qty, off, dlS, nx, offS)
  local s = a .. Iq(qty) .. '\031' .. (offS or I(off)) .. b .. dlS .. '\031' .. nowS
  if nx then return redis.call('SETNX', key, s) == 1 end
  set_value(key, s)
  return true
end
-- part_held(key) is the reserve script's reply for the part at key when
-- its record has a state ({state, qty, offset, 0}: lua/reserve.lua's
-- one-part take), else nil. A function of the library, not a closure per
-- call.
local function part_held(key)
  local cur = part_read(key)
  if cur and cur.state then return {cur.state, tonumber(cur.qty) or 0, tonumber(cur.offset) or 0, 0} end
end
