package inventory

import (
	"context"
	"sync"

	"github.com/shardis/shardis/node"
)

// refuseShort's reads of one order: which node reads what (planPeek) and
// running them (runPeeks); the rule they serve is soldout.go's, the
// batches that carry them peekbatch.go's.

// peekRead is one stock hash a peekCall reads.
type peekRead struct {
	sku   int  // index into the order's []shortSKU (refuseShort's skus)
	cand  bool // the node is one of the SKU's candidates
	quota bool // the node is the user's quota node of the SKU's route
}

// peekCall is one order's reads on one node (peekOn) and their reply.
type peekCall struct {
	n      *node.Node
	home   bool
	reads  []peekRead
	keys   []string // their stock hashes
	quotas []int    // the SKUs (indexes into that []shortSKU) whose user's quota counter it reads
	qkeys  []string // those counters
	status string
	vals   []stockVals // per read
	held   []int64     // per quotas
	err    error
	req    peekReq // its reads (peekbatch.go)
	queued bool    // req was queued by runPeeks
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

// spreadQuotas reports whether an order of userID has quota parts on two
// or more nodes: its items' routes put the user on different quota nodes
// (the file comment's "Per-user limits": such an order is read first).
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

// isOneOf reports whether n is one of nodes.
func isOneOf(n *node.Node, nodes []*node.Node) bool {
	for _, m := range nodes {
		if m == n {
			return true
		}
	}
	return false
}

// callOn returns the call of calls on node n, or nil.
func callOn(calls []*peekCall, n *node.Node) *peekCall {
	for _, c := range calls {
		if c.n == n {
			return c
		}
	}
	return nil
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

// fill sets the call's reply from its answered reads r, or err.
func (c *peekCall) fill(r *peekReq, err error) {
	if c.err = err; err != nil {
		return
	}
	c.status = r.status
	for _, v := range r.vals {
		if v.err != nil {
			c.err = v.err
			return
		}
	}
	c.vals, c.held = r.vals, r.held
}
