package inventory

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/shardis/shardis/node"
)

// One-script reservations.
//
// An order whose items all have the order's home node as their first
// choice (itemCandidates offers every item to the home node first when the
// item's route has it and it is enabled and usable there), and which that
// node can meet in full, needs no other node: its record and its parts are
// written by one script, atomically (localScript), instead of
// begin → take → commit. With every route on every node this is every
// order whose home node holds the stock. The script takes anything only when the order is free (no
// record, or a failed attempt) and every part can be met in full there;
// otherwise it writes nothing and the order takes the one-round or the
// general path, which handles existing records, splits and refusals (an
// order that has a record goes straight to the general path). Being one
// script, it has
// no intermediate state: a crash before it runs leaves nothing, after it
// the order is reserved; a timeout is an unknown outcome that a retry of
// the order id resolves (it finds the record), and a Cancel that comes
// first leaves a tombstone the script respects.
//
// Per-user quota parts take this path only when the user's quota node is
// the home node too and the topology is stable.

// takeWhole is the Lua that localScript and stageTakeScript share: it
// takes a set of parts on one node all or nothing.
//
// plan_parts(kb, ab, user, offsets) reads the parts whose KEYS start at kb (part
// key, counter key, and redo queue (kind s) or stock hash holding the
// limit (kind q), per part, to the end of KEYS) and whose ARGV start at ab
// (id, kind, sku, want, item, route, queue per part). It returns the plan,
// or nil when some part cannot be met in full (it exists already, stock is
// short, a limited SKU has no user, a quota would be exceeded), or nil and
// an error reply for a corrupt value (a counter, or a queue's last offset
// in the redo offsets hash). When a stock part is short or a limited SKU
// has no user it returns nil, nil, true: a refusal that a read of the
// SKU's other nodes may settle without a write (soldout.go). It writes
// nothing. For a stock part it
// records the counter's available and reserved once the part is taken
// (p.avail, p.resv, after the order's earlier parts on the same counter).
//
// write_parts(plan, pending, offsets, order, token, pdl) takes every
// planned part (pending under token until pdl) and returns the redo offset
// of each (0 for quota parts). It writes a stock counter's planned values
// in one HSET rather than two increments: the script is atomic, so
// nothing changed them since the plan read them.
const takeWhole = `
local function plan_parts(kb, ab, user, offsets)
  local np = (#KEYS - kb + 1) / 3
  local avail, resv, held, plan = {}, {}, {}, {}
  for i = 0, np - 1 do
    local a = ab + i * 7
    local p = {pk = KEYS[kb + i * 3], ck = KEYS[kb + 1 + i * 3], xk = KEYS[kb + 2 + i * 3], id = ARGV[a], kind = ARGV[a + 1],
               sku = ARGV[a + 2], want = tonumber(ARGV[a + 3]), item = tonumber(ARGV[a + 4]), route = ARGV[a + 5]}
    if redis.call('EXISTS', p.pk) == 1 then return nil end
    local err
    if p.kind == 's' then
      zset_ok(p.xk) -- the redo queue must be a sorted set
      local s = stock_get(p.ck)
      if avail[p.ck] == nil then
        avail[p.ck], err = int(s[1], p.ck .. ' available')
        if err then return nil, err end
        resv[p.ck], err = int(s[3], p.ck .. ' reserved')
        if err then return nil, err end
      end
      local _, oerr = offsets_ok(offsets, p.xk)
      if oerr then return nil, oerr end
      local limit
      limit, err = int(s[2], p.ck .. ' limit')
      if err then return nil, err end
      if avail[p.ck] < p.want or (limit > 0 and user == '') then return nil, nil, true end
      avail[p.ck], resv[p.ck] = avail[p.ck] - p.want, resv[p.ck] + p.want
      p.avail, p.resv = avail[p.ck], resv[p.ck] -- the hash's values once this part is taken
    else
      local limit
      limit, err = int(redis.call('HGET', p.xk, 'limit'), p.xk .. ' limit')
      if err then return nil, err end
      if held[p.ck] == nil then
        held[p.ck], err = int(redis.call('GET', p.ck), p.ck)
        if err then return nil, err end
      end
      if limit > 0 and held[p.ck] + p.want > limit then return nil end
      held[p.ck] = held[p.ck] + p.want
    end
    plan[#plan + 1] = p
  end
  return plan
end
local function write_parts(plan, pending, offsets, order, token, pdl)
  local offs, pdlS = {}, I(pdl)
  for _, p in ipairs(plan) do
    local off = 0
    if p.kind == 's' then
      -- absolute values from the plan into the script call's copy of the
      -- hash (stock_set: flush writes it once; the script is atomic)
      stock_set(p.ck, p.avail, p.resv)
      off = next_offset(offsets, p.xk)
      zadd_later(p.xk, I(off), p.id)
    else
      redis.call('INCRBY', p.ck, I(p.want))
    end
    part_put(p.pk, {state = 'pending', kind = p.kind, order = order, token = token, sku = p.sku,
      qty = I(p.want), item = I(p.item), counter = p.ck, redo = p.kind == 's' and p.xk or '', offset = I(off),
      deadline = pdlS, at = nowS})
    zadd_later(pending, pdlS, p.id)
    offs[#offs + 1] = off
  end
  return offs
end
`

// localScript reserves a whole order on its home node in one step.
//
// KEYS: 1 stamp, 2 order key, 3 pending index, 4 redo offsets, then per
// part: part key, counter key, and redo queue (kind s) or stock hash
// holding the limit (kind q).
// ARGV: 4 token, 5 digest, 6 user, 7 ttl ms, 8 retention s, 9 order id,
// 10 part grace ms, then per part: id, kind, sku, want, item, route, queue.
// Returns {"existing"} (the order has a record: nothing written),
// {"short"} (no record, and a stock part is short here or a limited SKU
// has no user: nothing written, soldout.go may refuse without a write),
// {"fallback"} (nothing written), or {"reserved", deadline ms,
// offset per part}.
var localScript = newGroupedScript("reserve-local", true, takeWhole+`
local key = KEYS[2]
local f = redis.call('HMGET', key, 'status', 'moved')
if f[1] and not f[2] and f[1] ~= 'failed' then return {'existing'} end
zset_ok(KEYS[3]) -- the pending index must be a sorted set
local plan, err, short = plan_parts(5, 11, ARGV[6], KEYS[4])
if err then return err end
if not plan then return {short and 'short' or 'fallback'} end
local deadline = now + tonumber(ARGV[7])
local offs = write_parts(plan, KEYS[3], KEYS[4], ARGV[9], ARGV[4], deadline + tonumber(ARGV[10]))
local parts, out = {}, {'reserved', deadline}
for i, p in ipairs(plan) do
  local j = {id = p.id, kind = p.kind, item = p.item, node = ARGV[1], route = p.route, sku = p.sku, qty = p.want, redo = '', offset = 0}
  if p.kind == 's' then j.redo, j.offset = p.xk, offs[i] end
  parts[#parts + 1] = j
  out[#out + 1] = offs[i]
end
if f[1] or f[2] then redis.call('DEL', key) end -- a failed or moved record (a record always has one of them)
-- reserved when created: no reserved_at (it would repeat created), and no
-- user field for an order without one (DecodeOrder reads both as before)
redis.call('HSET', key, 'status', 'reserved', 'token', ARGV[4], 'digest', ARGV[5],
  'deadline', I(deadline), 'created', nowS, 'parts', pack_parts(ARGV[9], ARGV[4], parts))
if ARGV[6] ~= '' then redis.call('HSET', key, 'user', ARGV[6]) end
redis.call('EXPIRE', key, I(tonumber(ARGV[8])))
return out
`)

// errHasRecord is reserveLocal's word that the order already has a record.
var errHasRecord = errors.New("inventory: the order has a record")

// errShortSeen is reserveLocal's and reserveStaged's word that the order
// found a stock part short (or a limited SKU without a user) and that
// nothing of the attempt can be reserved (it wrote nothing, or its parts
// are rolled back): refuseShort (soldout.go) may settle the order with
// reads alone before the general path writes.
var errShortSeen = errors.New("inventory: a part was short and nothing was written")

// reserveLocal tries the one-script path (see the file comment). ok is
// false when the order must take another path; then nothing was written,
// and err is errHasRecord when the order already has a record (a retry:
// only the general path answers for an existing record), or errShortSeen
// when it has none and the home node is short.
func (inv *Inventory) reserveLocal(ctx context.Context, home *node.Node, orderID string, items []Item, userID string, ttl time.Duration) (res Reservation, ok bool, err error) {
	token := newToken()
	var reqs []partReq
	for i, it := range items {
		set, _ := inv.set(ctx, it.Route)
		if c := inv.itemCandidates(set, home, orderID, it.SKU); len(c) == 0 || c[0] != home {
			return Reservation{}, false, nil
		}
		reqs = append(reqs, partReq{
			part:  part{ID: stockPartID(orderID, token, i), Node: home.Name(), Kind: PartStock, Item: i, Route: it.Route, SKU: it.SKU, Qty: it.Quantity},
			queue: inv.redoQueue(it.Route, it.SKU), ck: stockKey(it.Route, it.SKU),
		})
	}
	if userID != "" {
		if inv.topology(ctx).phase != PhaseStable {
			return Reservation{}, false, nil
		}
		for _, q := range inv.quotaParts(ctx, orderID, token, items, userID) {
			if q.node != home {
				return Reservation{}, false, nil
			}
			reqs = append(reqs, q.req)
		}
	}
	keys := make([]string, 0, 3+3*len(reqs))
	keys = append(keys, orderKey(orderID), PendingKey, RedoOffsetsKey)
	args := make([]any, 0, 7+7*len(reqs))
	args = append(args, token, digestOf(items, userID), userID, ms(ttl), seconds(inv.cfg.Retention), orderID, ms(partGrace))
	for _, r := range reqs {
		keys = append(keys, partKey(r.ID), r.ck, r.queue)
		args = append(args, r.ID, string(r.Kind), r.SKU, r.Qty, strconv.Itoa(r.Item), r.Route, r.queue)
	}
	v, err := inv.run(ctx, home, localScript, keys, args...)
	if err != nil {
		if outcomeUnknown(err) {
			return Reservation{}, true, fmt.Errorf("%w: order %q: outcome unknown, retry Reserve with the same order id: %w", ErrUnavailable, orderID, err)
		}
		return Reservation{}, true, err
	}
	st, dl, offs, err := decodeLocal(home.Name(), v, len(reqs))
	if err != nil {
		// The script ran and its answer cannot be read: as a timeout.
		return Reservation{}, true, fmt.Errorf("%w: order %q: outcome unknown, retry Reserve with the same order id: %w", ErrUnavailable, orderID, err)
	}
	switch st {
	case localExisting:
		return Reservation{}, false, errHasRecord
	case localFallback:
		return Reservation{}, false, nil
	case localShort:
		return Reservation{}, false, errShortSeen
	}
	var parts []part
	for i, r := range reqs {
		p := r.part
		if p.Kind == PartStock {
			p.Redo, p.Offset = r.queue, offs[i]
		}
		parts = append(parts, p)
	}
	inv.stats.local.Add(1)
	return Reservation{OrderID: orderID, Receipts: receipts(parts), Deadline: time.UnixMilli(dl)}, true, nil
}

// decodeLocal reads localScript's reply to k part requests: {"existing"},
// {"short"}, {"fallback"}, or {"reserved", deadline ms, offset per part}.
func decodeLocal(nodeName string, v any, k int) (st localStatus, deadline int64, offsets []int64, err error) {
	r := newReplyReader(nodeName, localScript.name)
	raw := r.list(v, -1)
	if r.err == nil && len(raw) == 0 {
		r.fail(-1, "a list starting with a status word", v)
	}
	if r.err != nil {
		return "", 0, nil, r.err
	}
	switch st = localStatus(r.str(raw, 0)); st {
	case localExisting, localFallback, localShort:
		r.list(v, 1)
		return st, 0, nil, r.err
	case localReserved:
	default:
		if r.err == nil {
			r.fail(0, "existing, short, fallback or reserved", raw[0])
		}
		return "", 0, nil, r.err
	}
	raw = r.list(v, 2+k)
	if r.err != nil {
		return "", 0, nil, r.err
	}
	deadline = r.int(raw, 1)
	offsets = make([]int64, k)
	for i := range offsets {
		offsets[i] = r.int(raw, 2+i)
	}
	return st, deadline, offsets, r.err
}
