package inventory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// Item is one line of an order.
type Item struct {
	Route    string // route key of the inventory server, e.g. "clothes"
	SKU      string
	Quantity int64
}

// Receipt is one part of a reserved item: what one node deducted.
type Receipt struct {
	ItemIndex int
	SKU       string
	Quantity  int64
	Node      string
	RedoLog   string // redo-log key on Node
	Offset    int64  // the part's offset in RedoLog
}

// Reservation is the result of a successful Reserve.
type Reservation struct {
	OrderID  string
	Receipts []Receipt
	// Deadline is when an unconfirmed reservation expires, by the order
	// home node's clock.
	Deadline time.Time
}

// part is one deduction as the order record keeps it.
type part struct {
	ID     string `json:"p"`
	Node   string `json:"n"`
	Kind   string `json:"k"` // "s" stock, "q" per-user quota
	Item   int    `json:"i"`
	Route  string `json:"r"`
	SKU    string `json:"s"`
	Qty    int64  `json:"q"`
	Redo   string `json:"l,omitempty"`
	Offset int64  `json:"o,omitempty"`
}

// partGrace is added to a part's deadline so that, despite clock skew
// between nodes, parts are examined after their order's deadline.
const partGrace = time.Second

// commitTimeout bounds the commit step, which ignores the caller's
// cancellation.
const commitTimeout = 2 * time.Second

// Reserve takes every item of an order, all or nothing, and holds it for
// ttl (0 = inventory.reservation_ttl; capped by max_reservation_ttl).
//
// Each item is taken from its route's nodes in Candidates(orderID+sku)
// order, up to what each node has, so an item may be split across nodes;
// drained and unusable nodes are skipped. Nodes work concurrently, one
// round trip per node per round. If an item cannot be met, a node fails,
// or the per-user limit would be exceeded, every part already taken is
// cancelled (a part whose outcome is unknown gets a tombstone, so a
// reserve still in flight takes nothing) and the error wraps
// [ErrInsufficientStock] (naming the SKU), [ErrLimitExceeded] or
// [ErrUnavailable].
//
// Reserve is idempotent per order id: a retry, even concurrent, of an order
// that succeeded returns the same receipts and takes nothing more; a
// concurrent retry waits for the running attempt. An order id that was
// cancelled, or tombstoned by a Cancel that came first, is refused with
// [ErrCancelled]; reuse with different items with [ErrOrderMismatch].
func (inv *Inventory) Reserve(ctx context.Context, orderID string, items []Item, userID string, ttl time.Duration) (Reservation, error) {
	res, err := inv.reserve(ctx, orderID, items, userID, ttl)
	inv.stats.reserve(err)
	return res, err
}

func (inv *Inventory) reserve(ctx context.Context, orderID string, items []Item, userID string, ttl time.Duration) (Reservation, error) {
	if err := inv.checkReserve(orderID, items, userID); err != nil {
		return Reservation{}, err
	}
	switch {
	case ttl < 0:
		return Reservation{}, fmt.Errorf("%w: ttl is negative (%v)", ErrInvalid, ttl)
	case ttl == 0:
		ttl = inv.cfg.ReservationTTL
	case ttl > inv.cfg.MaxReservationTTL:
		ttl = inv.cfg.MaxReservationTTL
	}
	home, err := inv.orderHome(orderID)
	if err != nil {
		return Reservation{}, err
	}
	token := newToken()
	rec, err := inv.begin(ctx, home, orderID, token, digestOf(items, userID), userID, ttl)
	if err != nil {
		return Reservation{}, err
	}
	if rec.status != "begin" {
		return inv.existing(orderID, rec)
	}

	parts, unknown, err := inv.take(ctx, orderID, token, rec.deadline.Add(partGrace), items, userID)
	if err != nil {
		inv.abandon(ctx, home, orderID, token, parts, unknown)
		return Reservation{}, err
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up before the commit: undo now rather than hold
		// the stock until the attempt's lease runs out.
		inv.abandon(ctx, home, orderID, token, parts, nil)
		return Reservation{}, fmt.Errorf("order %q: %w", orderID, err)
	}
	blob, _ := json.Marshal(parts)
	// The commit runs to completion even if the caller cancels now, so its
	// outcome is known whenever the node answers.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	rec, err = inv.orderOp(cctx, home, orderID, "commit", token, string(blob), seconds(inv.cfg.Retention))
	if err != nil {
		if !outcomeUnknown(err) {
			// Refused before the network, or answered with an error reply
			// (OOM …): the commit did not apply. Return the parts now
			// rather than hold them until their deadline.
			inv.abandon(ctx, home, orderID, token, parts, nil)
			return Reservation{}, fmt.Errorf("order %q: commit refused: %w", orderID, err)
		}
		// Unknown outcome: committed or not, the parts are safe. A retry
		// returns the receipts if it committed; otherwise the lease runs
		// out and the reconciler cancels the parts after their deadline.
		return Reservation{}, fmt.Errorf("%w: order %q: commit outcome unknown, retry Reserve with the same order id: %w",
			ErrUnavailable, orderID, err)
	}
	if rec.status != "reserved" {
		inv.abandon(ctx, home, orderID, token, parts, nil)
		if rec.reason == "cancelled" {
			return Reservation{}, fmt.Errorf("%w: order %q was cancelled while it was being reserved", ErrCancelled, orderID)
		}
		return Reservation{}, fmt.Errorf("%w: order %q: the attempt lost its lease (order is %s); retry", ErrUnavailable, orderID, rec.reason)
	}
	return Reservation{OrderID: orderID, Receipts: receipts(parts), Deadline: rec.deadline}, nil
}

func (inv *Inventory) checkReserve(orderID string, items []Item, userID string) error {
	if err := checkID("order_id", orderID); err != nil {
		return err
	}
	if userID != "" {
		if err := checkID("user_id", userID); err != nil {
			return err
		}
	}
	if len(items) == 0 {
		return fmt.Errorf("%w: items is empty", ErrInvalid)
	}
	if len(items) > MaxItems {
		return fmt.Errorf("%w: %d items, at most %d", ErrInvalid, len(items), MaxItems)
	}
	for i, it := range items {
		if _, err := inv.set(it.Route); err != nil {
			return fmt.Errorf("items[%d]: %w", i, err)
		}
		if p := idProblem(it.SKU); p != "" {
			return fmt.Errorf("%w: items[%d].sku_id %s", ErrInvalid, i, p)
		}
		if q := it.Quantity; q <= 0 || q > MaxQuantity {
			return fmt.Errorf("%w: items[%d].quantity is %d, want 1..%d", ErrInvalid, i, q, MaxQuantity)
		}
	}
	return nil
}

// begin opens an attempt on the order record, waiting while another
// attempt holds it.
func (inv *Inventory) begin(ctx context.Context, home *node.Node, orderID, token, digest, userID string, ttl time.Duration) (orderRecord, error) {
	for {
		rec, err := inv.orderOp(ctx, home, orderID, "begin", token,
			ms(inv.opts.AttemptLease), digest, userID, ms(ttl), seconds(inv.cfg.Retention))
		if err != nil || rec.status != "reserving" {
			return rec, err
		}
		wait := min(rec.wait, 20*time.Millisecond) + time.Millisecond
		select {
		case <-ctx.Done():
			return rec, fmt.Errorf("%w: order %q: another attempt is still reserving it: %w", ErrUnavailable, orderID, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// existing answers a Reserve whose order already has an outcome.
func (inv *Inventory) existing(orderID string, rec orderRecord) (Reservation, error) {
	switch rec.status {
	case "reserved", "confirmed":
		return Reservation{OrderID: orderID, Receipts: receipts(rec.parts), Deadline: rec.deadline}, nil
	case "cancelled":
		return Reservation{}, fmt.Errorf("%w: order %q (%s)", ErrCancelled, orderID, rec.reason)
	case "mismatch":
		return Reservation{}, fmt.Errorf("%w: order %q", ErrOrderMismatch, orderID)
	}
	return Reservation{}, fmt.Errorf("%w: order %q: unexpected order state %q", ErrUnavailable, orderID, rec.status)
}

// abandon rolls an attempt back: cancel its parts (tombstones for unknown
// outcomes), then mark the attempt failed so the order id may be retried.
func (inv *Inventory) abandon(ctx context.Context, home *node.Node, orderID, token string, parts, unknown []part) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	all := append(parts, unknown...)
	inv.stats.rolledBack.Add(int64(len(all)))
	pending := inv.settleParts(ctx, orderID, Cancel, all)
	if pending > 0 {
		inv.log.Warn("reserve rollback deferred", "order", orderID, "pending_parts", pending)
	}
	if _, err := inv.orderOp(ctx, home, orderID, "fail", token); err != nil {
		inv.log.Warn("could not mark failed attempt; its lease will expire", "order", orderID, "err", err)
	}
}

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
}

// take runs the reserve rounds. It returns the parts taken, the parts whose
// outcome is unknown (their node failed mid-call), and the first error.
func (inv *Inventory) take(ctx context.Context, orderID, token string, deadline time.Time, items []Item, userID string) (taken, unknown []part, err error) {
	states := make([]itemState, len(items))
	for i, it := range items {
		set, _ := inv.set(it.Route)
		rk := set.Key()
		st := itemState{set: set, need: it.Quantity}
		for _, n := range set.Candidates(orderID + it.SKU) {
			if n.RouteEnabled(rk) && n.Usable() {
				st.cands = append(st.cands, n)
			}
		}
		st.usable = len(st.cands)
		states[i] = st
	}

	batches := map[*node.Node][]partReq{}
	// Per-user quota: one part per (route, sku) on the node that owns the
	// user in that route. It never fails over, or the limit would split.
	type rs struct{ route, sku string }
	quotaDown := map[rs]string{}
	if userID != "" {
		want := map[rs]int64{}
		var order []rs
		for _, it := range items {
			k := rs{it.Route, it.SKU}
			if _, ok := want[k]; !ok {
				order = append(order, k)
			}
			want[k] += it.Quantity
		}
		for _, k := range order {
			set := states[indexOfRoute(items, k.route)].set
			n := set.Nodes()[set.Ring().Home("user:"+userID)]
			if !n.Usable() {
				quotaDown[k] = n.Name()
				continue
			}
			batches[n] = append(batches[n], partReq{
				part:  part{ID: quotaPartID(orderID, token, k.route, k.sku), Node: n.Name(), Kind: "q", Item: -1, Route: k.route, SKU: k.sku, Qty: want[k]},
				queue: stockKey(k.route, k.sku), ck: quotaKey(k.route, k.sku, userID),
			})
		}
	}

	limited := map[rs]bool{}
	for {
		for i := range states {
			st := &states[i]
			if st.need <= 0 || st.pos >= len(st.cands) {
				continue
			}
			n := st.cands[st.pos]
			st.pos++
			it := items[i]
			batches[n] = append(batches[n], partReq{
				part:  part{ID: stockPartID(orderID, token, i), Node: n.Name(), Kind: "s", Item: i, Route: it.Route, SKU: it.SKU, Qty: st.need},
				queue: inv.redoQueue(it.Route, it.SKU), ck: stockKey(it.Route, it.SKU),
			})
		}
		if len(batches) == 0 {
			break
		}
		results := inv.runBatches(ctx, orderID, token, deadline, batches)
		batches = map[*node.Node][]partReq{}
		for _, res := range results {
			if res.err != nil {
				if err == nil {
					err = res.err
				}
				if res.unknown {
					for _, r := range res.reqs {
						unknown = append(unknown, r.part)
					}
				}
				continue
			}
			for j, r := range res.reqs {
				rep := res.replies[j]
				switch {
				case rep.state == "pending":
					p := r.part
					p.Qty = rep.qty
					if p.Kind == "s" {
						p.Redo, p.Offset = r.queue, rep.offset
						states[p.Item].need -= rep.qty
					}
					taken = append(taken, p)
				case rep.state == "limit":
					if err == nil {
						err = fmt.Errorf("%w: user %q holds %d of %s/%s, limit %d, order wants %d",
							ErrLimitExceeded, userID, rep.qty, r.Route, r.SKU, rep.limit, r.Qty)
					}
				case rep.state == "none", rep.state == "nolimit":
				default:
					if err == nil {
						err = fmt.Errorf("%w: node %s: part %s is already %s", ErrUnavailable, r.Node, r.ID, rep.state)
					}
				}
				if r.Kind == "s" && rep.limit > 0 && userID != "" {
					limited[rs{r.Route, r.SKU}] = true
				}
			}
		}
		if err != nil {
			return taken, unknown, err
		}
	}
	for k, name := range quotaDown {
		if limited[k] {
			return taken, unknown, fmt.Errorf("%w: %s/%s has a per-user limit and node %s, which keeps user %q's quota, is unavailable",
				ErrUnavailable, k.route, k.sku, name, userID)
		}
	}
	for i, st := range states {
		if st.need <= 0 {
			continue
		}
		it := items[i]
		if st.usable == 0 {
			return taken, unknown, fmt.Errorf("%w: items[%d] %s/%s: no enabled, usable node in the route (%s)",
				ErrUnavailable, i, it.Route, it.SKU, describeNodes(st.set))
		}
		return taken, unknown, fmt.Errorf("%w: items[%d] sku %s (route %s): wanted %d, %d available on %d usable node(s)",
			ErrInsufficientStock, i, it.SKU, it.Route, it.Quantity, it.Quantity-st.need, st.usable)
	}
	return taken, unknown, nil
}

// describeNodes says why each node of a set cannot take stock, e.g.
// "n1 down, n2 drained".
func describeNodes(set *router.Set) string {
	var parts []string
	for _, n := range set.Nodes() {
		switch {
		case !n.RouteEnabled(set.Key()):
			parts = append(parts, n.Name()+" drained")
		case n.State() != node.StateUp:
			parts = append(parts, n.Name()+" down")
		case !n.Usable():
			parts = append(parts, n.Name()+" breaker open")
		default:
			parts = append(parts, n.Name()+" up")
		}
	}
	return strings.Join(parts, ", ")
}

func indexOfRoute(items []Item, route string) int {
	for i, it := range items {
		if it.Route == route {
			return i
		}
	}
	return 0
}

type reply struct {
	state  string
	qty    int64
	offset int64
	limit  int64
}

type batchResult struct {
	reqs    []partReq
	replies []reply
	err     error
	unknown bool // the call may have run: its parts need tombstones
}

// runBatches runs one reserve script per node, concurrently.
func (inv *Inventory) runBatches(ctx context.Context, orderID, token string, deadline time.Time, batches map[*node.Node][]partReq) []batchResult {
	out := make([]batchResult, 0, len(batches))
	if len(batches) == 1 { // one node: no goroutine needed
		for n, reqs := range batches {
			out = append(out, runBatch(ctx, n, orderID, token, deadline, reqs))
		}
		return out
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for n, reqs := range batches {
		wg.Add(1)
		go func(n *node.Node, reqs []partReq) {
			defer wg.Done()
			res := runBatch(ctx, n, orderID, token, deadline, reqs)
			mu.Lock()
			out = append(out, res)
			mu.Unlock()
		}(n, reqs)
	}
	wg.Wait()
	return out
}

func runBatch(ctx context.Context, n *node.Node, orderID, token string, deadline time.Time, reqs []partReq) batchResult {
	res := batchResult{reqs: reqs}
	res.replies, res.err = reserveOn(ctx, n, orderID, token, deadline, reqs)
	if res.err != nil {
		res.unknown = outcomeUnknown(res.err)
		res.err = nodeErr(n, res.err)
	}
	return res
}

func reserveOn(ctx context.Context, n *node.Node, orderID, token string, deadline time.Time, reqs []partReq) ([]reply, error) {
	keys := make([]string, 0, 3+3*len(reqs))
	keys = append(keys, stampKey, keyPending, keyRedoOffset)
	args := make([]any, 0, 4+6*len(reqs))
	args = append(args, n.Name(), orderID, token, deadline.UnixMilli())
	for _, r := range reqs {
		keys = append(keys, partKey(r.ID), r.ck, r.queue)
		args = append(args, r.ID, r.Kind, r.SKU, r.Qty, strconv.Itoa(r.Item), r.queue)
	}
	raw, err := reserveScript.Run(ctx, n.Client(), keys, args...).Slice()
	if err != nil {
		return nil, err
	}
	if len(raw) != len(reqs) {
		return nil, fmt.Errorf("reserve script returned %d results for %d parts", len(raw), len(reqs))
	}
	out := make([]reply, len(raw))
	for i, v := range raw {
		t, ok := v.([]any)
		if !ok || len(t) != 4 {
			return nil, fmt.Errorf("reserve script: malformed result %v", v)
		}
		out[i].state, _ = t[0].(string)
		out[i].qty, _ = t[1].(int64)
		out[i].offset, _ = t[2].(int64)
		out[i].limit, _ = t[3].(int64)
	}
	return out, nil
}

// outcomeUnknown reports whether a failed call may have run on the node.
// A refusal before the network, or an error reply, means it did not.
func outcomeUnknown(err error) bool {
	if errors.Is(err, node.ErrDown) || errors.Is(err, node.ErrBreakerOpen) {
		return false
	}
	var rerr redis.Error
	return !errors.As(err, &rerr)
}

func receipts(parts []part) []Receipt {
	var out []Receipt
	for _, p := range parts {
		if p.Kind == "s" {
			out = append(out, Receipt{ItemIndex: p.Item, SKU: p.SKU, Quantity: p.Qty, Node: p.Node, RedoLog: p.Redo, Offset: p.Offset})
		}
	}
	return out
}

func digestOf(items []Item, userID string) string {
	h := xxhash.New()
	_, _ = h.WriteString(userID)
	for _, it := range items {
		_, _ = h.WriteString("\x00" + it.Route + "\x00" + it.SKU + "\x00" + strconv.FormatInt(it.Quantity, 10))
	}
	return strconv.FormatUint(h.Sum64(), 16)
}

func newToken() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
