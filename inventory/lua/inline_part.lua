-- Inline parts (inline.go holds their rule): a stock part the local
-- reserve took has no record of its own while its order record, on the
-- same node, is reserved; that record holds it.
--
-- part_get(key) is the part record at key (part_read), or, when the key
-- does not exist, the inline part the part id names, read as the pending
-- record the reserve would have written (inline_fields); nil for neither.
-- inline_write(key, t) writes the record of every inline part of the
-- order record t (order_get's table) at key that has none yet, as
-- part_get reads it: every step that decides or moves a reserved record
-- calls it first; a decision calls inline_settle, which writes them
-- settled as the order.
local PFX_ORDER = 'inv:order:'
-- the grace (partGrace, reserve.go) the local reserve adds to an order's
-- deadline for its parts' deadline
local PART_GRACE_MS = 1000
-- COUNTER_MAX: the largest value of a counter's field a settle moves
-- units to or from (2^62): far above any stock (at most 2^53), far enough
-- below Redis's 64-bit integers that HINCRBY of a part's units never
-- overflows (settle.lua refuses beyond it too)
local COUNTER_MAX = 2 ^ 62
-- inline_list(t, node) is the inline parts of order record t on node: the
-- entries of its part list (packed layout 2) that are stock parts of node
-- taken at an offset, when t is reserved, not moved, and written by the
-- local reserve (no reserved_at; a record a move installed has one:
-- order_install.lua); each entry a table of its fields and its part id.
local function inline_list(t, node)
  local out, tok, p = {}, t.token, t.parts
  if t.status ~= 'reserved' or t.moved or t.reserved_at or not tok or not p then return out end
  if string.sub(p, 1, #tok + 1) ~= '~' .. tok then return out end
  for e in string.gmatch(string.sub(p, #tok + 2), '\030([^\030]*)') do
    local kind, item, nd, route, sku, qty, queue, off, _, id = string.match(e .. '\031',
      '^([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031([^\031]*)\031')
    if kind == 's' and nd == node and queue ~= '' and off ~= '' and off ~= '0' then
      out[#out + 1] = {item = item, route = route, sku = sku, qty = qty, queue = queue, offset = off, id = id}
    end
  end
  return out
end
-- inline_fields(order, t, e) is the pending record of inline part entry e
-- (inline_list) of order record t of order id order.
local function inline_fields(order, t, e)
  return {state = 'pending', kind = 's', qty = e.qty, offset = e.offset, redo = PFX_REDO .. e.queue,
    counter = PFX_STOCK .. e.route .. ':' .. e.sku, sku = e.sku, item = e.item, order = order, token = t.token,
    deadline = I(tonumber(t.deadline) + PART_GRACE_MS), at = t.created}
end
-- inline_id(order, t, e) is the part id of inline part entry e of order
-- record t of order id order.
local function inline_id(order, t, e)
  if e.id ~= '' then return e.id end
  return order .. '|' .. t.token .. '|' .. e.item
end
local function part_get(key)
  local f = part_read(key)
  if f then return f end
  local id = string.sub(key, #partPrefix + 1)
  local order, tok = string.match(id, '^(.*)|([^|]*)|%d+$')
  if not order then return nil end
  -- a packed record, reserved and not moved, starts with the code r
  local v = redis.pcall('GET', PFX_ORDER .. order)
  if type(v) ~= 'string' or string.byte(v, 1) ~= 114 then return nil end
  local t = order_unpack(v)
  if t.token ~= tok then return nil end
  for _, e in ipairs(inline_list(t, ARGV[1])) do
    if inline_id(order, t, e) == id then return inline_fields(order, t, e) end
  end
  return nil
end
-- part_try(key) is part_get(key) for a script that must go on past one
-- record it cannot read (a value of the wrong type, a packed record with a
-- field that does not parse): the record (nil when gone) and nil, or nil
-- and why it could not be read. It only reads, so nothing is left half
-- done when it fails.
local function part_try(key)
  local ok, f = pcall(part_get, key)
  if ok then return f, nil end
  if type(f) == 'table' then f = f.err end
  return nil, tostring(f)
end
local function inline_write(key, t)
  local order = string.sub(key, #PFX_ORDER + 1)
  for _, e in ipairs(inline_list(t, ARGV[1])) do
    local pk = partPrefix .. inline_id(order, t, e)
    if redis.call('EXISTS', pk) == 0 then part_put(pk, inline_fields(order, t, e)) end
  end
end
-- inline_settle(key, t, st, retention, only) is inline_write for a
-- decision of the order record t at key to st ('confirmed' or
-- 'cancelled'): it writes the record of every inline part that has none
-- yet settled as st, as settle.lua settles a pending part (part_settle),
-- in the decision's script, so the Confirm or Cancel has no settle to
-- send for it; with only a string (the reconciler's expiry of a due
-- part), it settles only the part of that id and writes the others
-- pending ('': none). It returns the ids of the parts it settled, each
-- followed by \031 (no id holds a control character). When a part's
-- counter would make settle.lua refuse it (fewer units reserved than it
-- holds with the parts before it of that counter, a value that is not an integer, a key that is not a hash), it
-- settles none and writes them pending (inline_write): the settle that
-- follows refuses that part as before, naming the node and the key. Its
-- counter reads are redis.pcall: a counter of the wrong type must not
-- fail the decision's script, whose record would stay reserved.
local function inline_settle(key, t, st, retention, only)
  local order = string.sub(key, #PFX_ORDER + 1)
  local to = st == 'confirmed' and 'confirmed' or 'available'
  -- need: the units of the parts checked so far, by counter: parts
  -- sharing a counter (two items of one SKU) are checked together, their
  -- sum against reserved (stock_settle_check's claimed)
  local todo, need = {}, {}
  for _, e in ipairs(inline_list(t, ARGV[1])) do
    local id = inline_id(order, t, e)
    local pk = partPrefix .. id
    if redis.call('EXISTS', pk) == 0 then
      local p = inline_fields(order, t, e)
      if only and id ~= only then
        part_put(pk, p)
      else
        local q, rv, tv = tonumber(p.qty), redis.pcall('HGET', p.counter, 'reserved'), redis.pcall('HGET', p.counter, to)
        local r, tn, terr
        if type(rv) ~= 'table' and type(tv) ~= 'table' then
          r = int(rv, p.counter, ' reserved')
          tn, terr = int(tv, p.counter, ' ' .. to)
        end
        -- a value int() reads but HINCRBY would refuse (beyond 64 bits,
        -- or overflowing) would raise in part_settle, after the parts
        -- before it were settled and with the record still reserved
        local n = q and (need[p.counter] or 0) + q
        if not q or not r or r < n or terr or r > COUNTER_MAX or not tn or tn > COUNTER_MAX or tn < -COUNTER_MAX then
          inline_write(key, t)
          return ''
        end
        need[p.counter] = n
        todo[#todo + 1] = {pk = pk, id = id, p = p, q = q}
      end
    end
  end
  if #todo == 0 then return '' end
  redis.call('ZCARD', PENDING) -- fails now, before any write, if the index is not a sorted set
  local out = {}
  for _, d in ipairs(todo) do
    part_settle(d.pk, d.id, d.p, d.q, st == 'confirmed', retention)
    out[#out + 1] = d.id .. '\031'
  end
  return table.concat(out)
end
