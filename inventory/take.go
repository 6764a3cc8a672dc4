package inventory

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// This file holds the reserve rounds: which node each item's parts go to,
// one script per node per round, and how the replies are read.

// itemState tracks one item across rounds.
type itemState struct {
	set    *router.Set
	cands  []*node.Node
	pos    int
	need   int64
	usable int
}

type partReq struct {
	part
	queue string // redo queue key (stock) or stock key holding the limit (quota)
	ck    string // counter key: stock hash or quota counter
	// elsewhere (quota) is what the user's previous quota node still
	// counts while the topology migrates (-1: unknown), see migrate.go.
	elsewhere int64
}

// partDue is when the parts a reserve script takes come due, that is when
// the reconciler first looks at them (reconcile.go). It is never read from
// this instance's clock: either a time by the clock of the order's home
// node (the general path: the deadline its begin step wrote there, plus
// partGrace; the record names the attempt before any part is taken, so a
// part looked at early is only put off), or a hold counted from the clock
// of the node that takes the part, when its script runs (the one-round
// path, staged.go). The scripts read it with part_due (a prelude library
// definition: lua/lib_part_due.lua).
type partDue struct {
	at   time.Time     // by the home node's clock; used when hold is 0
	hold time.Duration // after the taking node's clock
}

// arg is d as a script argument: "+" and the hold in ms, or the time in
// ms.
func (d partDue) arg() string {
	if d.hold > 0 {
		var b [24]byte // one allocation, the string's ("+" + FormatInt made two)
		return string(strconv.AppendInt(append(b[:0], '+'), d.hold.Milliseconds(), 10))
	}
	return strconv.FormatInt(d.at.UnixMilli(), 10)
}

// take runs the reserve rounds. It returns the parts taken, the parts whose
// outcome is unknown (their node failed mid-call), and the first error.
//
// Each round offers every item still short to its next candidate node
// (the quota parts go with the first round, to the user's quota node
// only), all nodes at once; an item that a node met in part asks the next
// candidate for the rest. The rounds end when every item is met, or no
// item has a candidate left, or a reply refuses the order.
func (inv *Inventory) take(ctx context.Context, home *node.Node, orderID, token string, deadline partDue, items []Item, userID string) (taken, unknown []part, err error) {
	t := &takeRun{inv: inv, orderID: orderID, token: token, items: items, userID: userID,
		states: make([]itemState, len(items)), quotaDown: map[routeSKU]string{}, limited: map[routeSKU]bool{}}
	for i, it := range items {
		set, _ := inv.set(ctx, it.Route)
		st := itemState{set: set, need: it.Quantity, cands: inv.itemCandidates(set, home, orderID, it.SKU, userID)}
		st.usable = len(st.cands)
		t.states[i] = st
	}
	batches := t.quotaBatches(ctx)
	for {
		batches = t.offerNext(batches)
		if len(batches) == 0 {
			break
		}
		results := inv.runBatches(ctx, orderID, token, deadline, batches)
		batches = nil
		for _, res := range results {
			t.absorb(res)
		}
		if t.err != nil {
			return t.taken, t.unknown, t.err
		}
	}
	return t.taken, t.unknown, t.shortfall()
}

// routeSKU names a SKU of a route (a quota part's scope).
type routeSKU struct{ route, sku string }

// takeRun is the state of one take: what each item still needs, and what
// the rounds took, left unknown or refused so far.
type takeRun struct {
	inv                    *Inventory
	orderID, token, userID string
	items                  []Item
	states                 []itemState
	// quotaDown: the quota node of a (route, sku) was not usable (its part
	// was not sent); limited: a reply said the SKU has a per-user limit.
	quotaDown map[routeSKU]string
	limited   map[routeSKU]bool

	taken, unknown []part
	err            error // the first refusal or failure
}

// quotaBatches returns the first round's batches: the order's per-user
// quota parts, one per (route, sku) on the node that owns the user in
// that route. They never fail over, or the limit would split: a quota
// node that is not usable is recorded in quotaDown instead.
func (t *takeRun) quotaBatches(ctx context.Context) nodeBatches {
	var batches nodeBatches
	if t.userID == "" {
		return batches
	}
	v := t.inv.topology(ctx)
	for _, q := range t.inv.quotaParts(ctx, t.orderID, t.token, t.items, t.userID) {
		if !t.inv.usable(q.node) {
			t.quotaDown[routeSKU{q.req.Route, q.req.SKU}] = q.node.Name()
			continue
		}
		q.req.elsewhere = t.inv.quotaElsewhere(ctx, v, q.req.Route, q.req.SKU, t.userID, q.node.Name())
		batches = batches.add(q.node, q.req)
	}
	return batches
}

// offerNext adds to batches, for every item still short with a candidate
// left, a part of what it needs on its next candidate node, and returns
// them.
func (t *takeRun) offerNext(batches nodeBatches) nodeBatches {
	for i := range t.states {
		st := &t.states[i]
		if st.need <= 0 || st.pos >= len(st.cands) {
			continue
		}
		n := st.cands[st.pos]
		st.pos++
		it := t.items[i]
		batches = batches.add(n, partReq{
			part:  part{ID: stockPartID(t.orderID, t.token, i), Node: n.Name(), Kind: PartStock, Item: i, Route: it.Route, SKU: it.SKU, Qty: st.need},
			queue: t.inv.redoQueue(it.Route, it.SKU), ck: stockKey(it.Route, it.SKU),
		})
	}
	return batches
}

// absorb takes in one node's batch result: a failed call keeps the first
// error (a corrupt node's whatever else went wrong) and its parts as
// unknown when the call may have run; each reply of a call that ran is
// absorbReply's.
func (t *takeRun) absorb(res batchResult) {
	if res.err != nil {
		if t.err == nil || (nodeAtFault(res.err) && !nodeAtFault(t.err)) {
			t.err = res.err
		}
		t.unknown = append(t.unknown, res.unknownParts()...)
		return
	}
	for j, r := range res.reqs {
		t.absorbReply(r, res.replies[j])
	}
}

// nodeAtFault reports whether err is a node's data or reply that no retry
// mends (a corrupt value, a malformed reply): the error a caller most
// needs to see.
func nodeAtFault(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrMalformedReply)
}

// absorbReply takes in the reply rep to part request r: a taken part
// counts against its item's need; a limit, a quota being moved, or a part
// in an unexpected state refuses the order (the first refusal is kept);
// a stock reply naming a per-user limit refuses an order without a user
// and marks the SKU limited.
func (t *takeRun) absorbReply(r partReq, rep reply) {
	switch rep.state {
	case takePending:
		p := r.part
		p.Qty = rep.qty
		if p.Kind == PartStock {
			p.Redo, p.Offset = r.queue, rep.offset
			t.states[p.Item].need -= rep.qty
		}
		t.taken = append(t.taken, p)
	case takeLimit:
		t.fail(refusal(r, rep, t.userID))
	case takeElsewhere:
		t.fail(fmt.Errorf("%w: %w: sku %q (route %q) has a per-user limit and user %q's quota is being moved by a topology change from a node that cannot be read now; retry",
			ErrUnavailable, ErrTopology, r.SKU, r.Route, t.userID))
	case takeNone:
	default:
		t.fail(fmt.Errorf("%w: node %s: part %q is already %s", ErrUnavailable, r.Node, r.ID, rep.state))
	}
	if r.Kind == PartStock && rep.limit > 0 && t.userID == "" {
		t.fail(refusal(r, rep, t.userID))
	}
	if r.Kind == PartStock && rep.limit > 0 && t.userID != "" {
		t.limited[routeSKU{r.Route, r.SKU}] = true
	}
}

// fail records err unless an error was recorded first.
func (t *takeRun) fail(err error) {
	if t.err == nil {
		t.err = err
	}
}

// shortfall is the answer of rounds that ran out of candidates: a limited
// SKU whose quota node was not usable, an item without a usable node, an
// item short of stock, or nil when every item was met.
func (t *takeRun) shortfall() error {
	for k, name := range t.quotaDown {
		if t.limited[k] {
			return fmt.Errorf("%w: sku %q (route %q) has a per-user limit and node %s, which keeps user %q's quota, is unavailable",
				ErrUnavailable, k.sku, k.route, name, t.userID)
		}
	}
	for i, st := range t.states {
		if st.need <= 0 {
			continue
		}
		it := t.items[i]
		if st.usable == 0 {
			return fmt.Errorf("%w: items[%d] sku %q (route %q): no usable node in the route: %s",
				ErrUnavailable, i, it.SKU, it.Route, t.inv.unusableNodes(st.set))
		}
		return fmt.Errorf("%w: items[%d] sku %q (route %q): wanted %d, %d available on %d usable node(s)",
			ErrInsufficientStock, i, it.SKU, it.Route, it.Quantity, it.Quantity-st.need, st.usable)
	}
	return nil
}

// quotaPart is one per-user quota part of an order and the node that
// counts it.
type quotaPart struct {
	node *node.Node
	req  partReq
}

// needsUserMayBeOwn reports whether rep, a reply to stock part r of an
// order without a user refusing it for the SKU's per-user limit, took
// less than r wants: the units missing may be held by an earlier attempt
// of the same order that took them before the limit was set, whose stage
// may still land, so the refusal needs a record that fences it out.
func needsUserMayBeOwn(r partReq, rep reply) bool {
	return r.Kind == PartStock && rep.limit > 0 && rep.qty < r.Qty
}

// limitMayBeOwn reports whether rep, a reply to quota part r refusing
// the order for the user's limit, counted units that may be another
// attempt's of the same order: the user holds any (here and on a quota
// node being moved from; quotaMayBeOwn). An attempt whose stage is still on its
// way (staged.go) may then succeed by the very units that refused this
// one, so the refusal needs a record that fences it out (soldout.go,
// "Per-user limits"); when the user holds none, no attempt of the order
// holds its quota, and the refusal needs none.
func limitMayBeOwn(r partReq, rep reply) bool {
	return r.Kind == PartQuota && rep.state == takeLimit && quotaMayBeOwn(rep.qty)
}

// quotaMayBeOwn is the rule of a refusal for the user's quota (over its
// limit by what the user holds plus what the order wants): the held units
// may be an earlier attempt's of the same order whenever there are any. An
// attempt's quota part holds all it wants or nothing, but an attempt of
// the same order id need not want what this one wants (an id reused with
// other items, answered ErrOrderMismatch once its attempt is known): one
// that wants less holds less than this one wants, and without its units
// the user may not be over the limit at all, so no order of the two
// attempts explains a refusal without a fence (found by a review:
// TestReusedIDRefusedByReadsIsFenced).
func quotaMayBeOwn(held int64) bool { return held > 0 }

// heldMayBeOwn is limitMayBeOwn's rule on its numbers: the user holds held
// units of a (route, SKU) whose quota part wants want; an attempt's quota
// part holds all it wants or nothing, so the held units may include an
// attempt's of the same order only when held ≥ want.
func heldMayBeOwn(held, want int64) bool { return held >= want }

// outcomeUnknown reports whether a failed call may have run on the node.
// A refusal before the network, or an error reply, means it did not; a
// write the durability level did not see acknowledged ([ErrNotDurable])
// ran on the master and may or may not survive a failover; a reply of the
// wrong shape ([ErrMalformedReply], reply.go) came from a script that ran.
func outcomeUnknown(err error) bool {
	if errors.Is(err, ErrNotDurable) {
		return true // ran on the master, not acknowledged by a replica
	}
	if errors.Is(err, ErrMalformedReply) {
		return true // the script ran; what it did cannot be read
	}
	if errors.Is(err, node.ErrDown) || errors.Is(err, node.ErrBreakerOpen) {
		return false
	}
	var rerr redis.Error
	return !errors.As(err, &rerr)
}
