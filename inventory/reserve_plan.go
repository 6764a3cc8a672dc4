package inventory

import (
	"context"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// Before a reserve writes: the nodes each item may take from (its home
// node first, its quota node, the spread key of a SKU split over
// several nodes), and the refusals decided by reads alone (refuseShort:
// the reads of an order's stock and quotas, peek, and the fence a refusal
// writes while a take may still land). The rule the refusals follow, and
// why they are safe, is soldout.go's; the sold-out and limit hints are
// soldout_hint.go's, the reads' batches peekbatch.go's.

// spreadQuotas reports whether an order of userID has quota parts on two
// or more nodes: its items' routes put the user on different quota nodes
// (soldout.go's "Per-user limits": such an order is read first).
func (inv *Inventory) spreadQuotas(ctx context.Context, items []Item, userID string) bool {
	if userID == "" || len(items) < 2 {
		return false
	}
	var first *node.Node
	for _, it := range items {
		set, err := inv.set(ctx, it.Route)
		if err != nil {
			return false // the paths say why
		}
		switch q := quotaNode(set, userID); {
		case first == nil:
			first = q
		case q != first:
			return true
		}
	}
	return false
}

// quotaNode is the node of set that keeps userID's per-user quotas of the
// route (Home("user:"+userID)); quotas never fail over, or a limit would
// split.
func quotaNode(set *router.Set, userID string) *node.Node {
	return set.Nodes()[set.Ring().Home("user:"+userID)]
}

// refuseShort refuses the order with reads alone when the general path
// could only refuse it, with no write or behind a fence (see the file
// comment), or returns nil and the order takes its next path. It marks or
// clears the hint of the order's SKUs by what it read.
func (inv *Inventory) refuseShort(ctx context.Context, home *node.Node, orderID string, items []Item, userID string) error {
	v := inv.topology(ctx)
	if v.refuse() != nil || v.phase != topology.PhaseStable {
		return nil
	}
	skus, calls := inv.planPeek(ctx, home, orderID, items, userID)
	if calls == nil {
		return nil
	}
	inv.runPeeks(ctx, v.token, orderID, calls)
	for _, c := range calls {
		if c.err != nil || (c.home && c.status != "" && recStatus(c.status) != recFailed) {
			inv.soldOut.clear(items)
			return nil // cannot decide, or an attempt answers for the order
		}
		for j, r := range c.reads {
			skus[r.sku].add(c.vals[j], r)
			if c.vals[j].limit > 0 {
				inv.limited.mark(skus[r.sku].ref)
			}
		}
		for j, k := range c.quotas {
			skus[k].qheld = c.held[j]
		}
	}
	for _, s := range skus {
		if hint, err := s.refusal(userID, inv.mutated(MutationLimitUnfenced)); err != nil {
			if hint {
				inv.soldOut.mark(s.ref)
			}
			inv.stats.refusedUnwritten.Add(1)
			return err
		}
	}
	for _, s := range skus {
		if hint, err := s.fencedRefusal(userID); err != nil {
			if !inv.mutated(MutationFenceSkip) && !inv.fenceRefusal(ctx, home, orderID) {
				break // an attempt answers for the order, or the fence failed
			}
			if hint {
				inv.soldOut.mark(s.ref)
			}
			inv.stats.refusedFenced.Add(1)
			return err
		}
	}
	inv.soldOut.clear(items) // enough: the next path answers
	return nil
}

// planPeek groups the order's SKUs and the reads refuseShort needs by
// node: the home node reads the order's record, every node of a SKU's
// route its stock hash (available counts on the candidates, reserved on
// all). calls is nil when some item has no usable node (the general path
// says why) or some node of an item's route is not usable (its holds
// cannot be read).
func (inv *Inventory) planPeek(ctx context.Context, home *node.Node, orderID string, items []Item, userID string) ([]shortSKU, []*peekCall) {
	skus := make([]shortSKU, 0, len(items))
	calls := []*peekCall{{n: home, home: true}} // the home node's first
items:
	for i, it := range items {
		ref := stockRef{it.Route, it.SKU}
		for k := range skus { // a few items: a scan beats a map
			if skus[k].ref == ref {
				skus[k].want += it.Quantity
				continue items
			}
		}
		set, err := inv.set(ctx, it.Route)
		if err != nil {
			return nil, nil
		}
		cands := inv.itemCandidates(set, home, orderID, it.SKU, userID)
		if len(cands) == 0 {
			return nil, nil
		}
		k := len(skus)
		skus = append(skus, shortSKU{ref: ref, item: i, want: it.Quantity, nodes: len(cands), allLimited: true})
		var q *node.Node
		if userID != "" {
			q = quotaNode(set, userID)
		}
		for _, n := range set.Nodes() {
			if !inv.usable(n) {
				return nil, nil
			}
			c := callOn(calls, n)
			if c == nil {
				c = &peekCall{n: n}
				calls = append(calls, c)
			}
			c.reads = append(c.reads, peekRead{sku: k, cand: isOneOf(n, cands), quota: n == q})
			c.keys = append(c.keys, stockKey(it.Route, it.SKU))
			if n == q {
				c.quotas = append(c.quotas, k)
				c.qkeys = append(c.qkeys, quotaKey(it.Route, it.SKU, userID))
			}
		}
	}
	return skus, calls
}

// itemCandidates returns the nodes an item of an order is taken from, in
// order: the enabled, usable nodes of set, the order's first choice first
// when it is one of them, then the rest in Candidates(orderID+sku) order.
//
// The first choice of an order without a user is its home node, so an
// order its home node can meet needs no other node (local.go). That of an
// order with a user is the user's quota node of the route (quotaNode),
// then the home node when the quota node is not a candidate: the item's
// first take then runs in the same call as the user's quota part, and a
// call whose quota part is over the limit takes nothing (reserveScript),
// so an order refused by the user's limit takes no stock on any node of a
// one-route order (nothing to roll back, no redo entry, no cancelled row
// in PostgreSQL); when the quota node is the home node this is the home
// node as before. Home nodes are spread uniformly by order id and quota
// nodes by user, so stock is still drawn evenly from every node of the
// route. Which node is tried first is a choice of cost only: every take
// is all-or-part of what the node holds, the same on any node.
func (inv *Inventory) itemCandidates(set *router.Set, home *node.Node, orderID, sku, userID string) []*node.Node {
	return inv.appendItemCandidates(make([]*node.Node, 0, 4), set, home, orderID, sku, userID)
}

// appendItemCandidates is itemCandidates appending to dst (a caller's
// array: no allocation for a route of up to its length).
func (inv *Inventory) appendItemCandidates(dst []*node.Node, set *router.Set, home *node.Node, orderID, sku, userID string) []*node.Node {
	var kb [96]byte
	key := spreadKey(kb[:0], orderID, sku)
	if userID != "" {
		q := quotaNode(set, userID)
		if c := set.AppendSpread(dst, key, q, inv.usable); len(c) == len(dst) || c[len(dst)] == q {
			return c
		}
	}
	return set.AppendSpread(dst, key, home, inv.usable)
}

// spreadKey is the key an item's candidates are spread by, orderID+sku,
// in buf (a caller's array when it fits). The string is buf's bytes
// (frozen), not a copy: it is for Set.AppendSpread, which keeps no key,
// and must not be kept either.
func spreadKey(buf []byte, orderID, sku string) string {
	return frozen(append(append(buf, orderID...), sku...))
}

// runPeeks runs every call's reads at the epoch token (peekOn), nodes
// concurrently, and fills in its reply or error. A read that can only
// queue behind a batch under way (peekbatch.go) is queued from this
// goroutine and waited for; one that would be sent at once gets a
// goroutine of its own, but the home node's, sent from this one.
func (inv *Inventory) runPeeks(ctx context.Context, token, orderID string, calls []*peekCall) {
	var wg sync.WaitGroup
	for _, c := range calls[1:] {
		if inv.opts.Faults == nil { // with faults, every read goes through them (peekOn)
			c.req.stocks, c.req.quotas = c.keys, c.qkeys
			if c.queued = inv.enqueuePeek(c.n, token, &c.req); c.queued {
				continue
			}
		}
		wg.Add(1)
		go func(c *peekCall) {
			defer wg.Done()
			if inv.opts.Faults == nil { // enqueuePeek gave it a batch's slot
				c.fill(&c.req, inv.peekErr(c.n, inv.sendOwnPeek(ctx, c.n, token, &c.req)))
				return
			}
			inv.peek(ctx, token, orderID, c)
		}(c)
	}
	inv.peek(ctx, token, orderID, calls[0]) // the home node's, on this goroutine
	for _, c := range calls[1:] {
		if c.queued {
			c.fill(&c.req, inv.peekErr(c.n, inv.waitPeek(ctx, c.n, &c.req)))
		}
	}
	wg.Wait()
}

// peek runs one call's reads (see runPeeks).
func (inv *Inventory) peek(ctx context.Context, token, orderID string, c *peekCall) {
	r := &c.req
	r.stocks, r.quotas = c.keys, c.qkeys
	if c.home {
		r.record = orderKey(orderID)
	}
	c.fill(r, inv.peekOn(ctx, c.n, token, r))
}

// fencedRefusal returns the error that refuses the order behind a fence
// for s, when the units that refuse it may be the order's own (the file
// comment), or nil, and whether it marks the hint.
func (s *shortSKU) fencedRefusal(userID string) (hint bool, err error) {
	switch {
	case s.limit > 0 && userID == "":
		return true, s.needsUserError()
	case userID != "" && s.overQuota():
		return false, s.limitError(userID)
	case s.avail < s.want:
		return true, &shortStockError{*s}
	}
	return false, nil
}

// fenceRefusal writes the fence of a refusal on the order's home node
// (orderScript's "fence" op: a failed record under a fresh token where the
// order has none) and reports whether the order may be refused behind it:
// the record is failed, this fence or an earlier one, and lists no parts.
// A failed one-round record lists its attempt's, which may still hold the
// very units that refuse the order (their cancels lost): the refusal
// steps aside to the paths, whose begin replaces the record and cancels
// them first (staged.go, "Replacing a failed record"). A fence whose
// outcome is unknown (its reply lost) is asked once more: the op writes
// only where there is no record, so the second finds the first's record,
// or whatever came meanwhile, and answers by it.
func (inv *Inventory) fenceRefusal(ctx context.Context, home *node.Node, orderID string) bool {
	token := newToken()
	for range 2 {
		rec, err := inv.orderOp(ctx, home, orderID, opFence, token, seconds(inv.cfg.Retention))
		if err == nil {
			return rec.status == recFailed && len(rec.parts) == 0
		}
		if !outcomeUnknown(err) || ctx.Err() != nil {
			break
		}
	}
	return false
}

// itemHomeFirst reports whether itemCandidates(set, home, …, userID)
// starts with home, whatever the order id and SKU (Set.SpreadsFirst: no
// ring walk, no allocation).
func (inv *Inventory) itemHomeFirst(set *router.Set, home *node.Node, userID string) bool {
	if userID != "" {
		if q := quotaNode(set, userID); set.SpreadsFirst(q, inv.usable) {
			return q == home
		}
	}
	return set.SpreadsFirst(home, inv.usable)
}

// redoQueue returns the queue of a SKU: xxhash(route:sku) mod queues.
func (inv *Inventory) redoQueue(route, sku string) string {
	var tmp [64]byte // route:sku hashed without a new string when it fits
	h := xxhash.Sum64(append(append(append(tmp[:0], route...), ':'), sku...))
	return RedoLogKey(int(h % uint64(inv.cfg.RedoQueues)))
}

// quotaParts returns an order's per-user quota parts: one per (route,
// sku), in the order of first appearance, for the units the order wants
// of it, on the node that owns the user in that route
// (Home("user:"+userID)); it never fails over, or the limit would split.
// The routes must be valid (checkReserve).
func (inv *Inventory) quotaParts(ctx context.Context, orderID, token string, items []Item, userID string) []quotaPart {
	type rs struct{ route, sku string }
	idx := map[rs]int{}
	var out []quotaPart
	for _, it := range items {
		k := rs{it.Route, it.SKU}
		if j, seen := idx[k]; seen {
			out[j].req.Qty += it.Quantity
			continue
		}
		set, _ := inv.set(ctx, it.Route)
		n := quotaNode(set, userID)
		idx[k] = len(out)
		out = append(out, quotaPart{node: n, req: partReq{
			part:  part{ID: quotaPartID(orderID, token, it.Route, it.SKU), Node: n.Name(), Kind: PartQuota, Item: -1, Route: it.Route, SKU: it.SKU, Qty: it.Quantity},
			queue: stockKey(it.Route, it.SKU), ck: quotaKey(it.Route, it.SKU, userID),
		}})
	}
	return out
}
