package inventory

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/shardis/shardis/router"
)

// Item is one line of an order.
type Item struct {
	Route string // route key of the inventory server, e.g. "clothes"
	// SKU names the stock on Route: 1..MaxIDLen bytes of valid UTF-8
	// without ASCII control bytes (below 0x20, and 0x7f).
	SKU string
	// Quantity is the number of units, 1..MaxQuantity.
	Quantity int64
}

// Receipt is one part of a reserved item: what one node deducted. An item
// may be split over several nodes; its receipts' quantities add up to the
// item's.
type Receipt struct {
	ItemIndex int    // index of the item in the Reserve call's items
	SKU       string // the item's SKU
	Quantity  int64  // units this node deducted
	Node      string // name of the node (its key under nodes: in the configuration)
	RedoLog   string // redo-log key on Node
	Offset    int64  // the part's offset in RedoLog
}

// Reservation is the result of a successful Reserve.
type Reservation struct {
	OrderID string // the order id Reserve was called with
	// Receipts has one entry per part of stock taken, in item order.
	Receipts []Receipt
	// Deadline is when an unconfirmed reservation expires, by the order
	// home node's clock. The hold counts from when the attempt began on
	// the home, so a Reserve slowed past its ttl (a paused caller, a retry
	// of an order reserved long before) may return a Deadline already
	// past: a Confirm then answers ErrExpired.
	Deadline time.Time
	// TTL is the hold time applied: the ttl asked for, or
	// inventory.reservation_ttl for 0, capped by max_reservation_ttl, in
	// whole milliseconds (the scripts' unit; at least 1ms). A
	// retry of an order already reserved keeps the first attempt's hold
	// (Deadline); TTL and TTLCapped then describe the retry's ttl, as the
	// record keeps the deadline, not the ttl it came from.
	TTL time.Duration
	// TTLCapped is true when the ttl asked for exceeded
	// inventory.max_reservation_ttl and TTL is the cap.
	TTLCapped bool
}

// part is one deduction as the order record keeps it (decode.go).
type part = OrderPart

// partGrace is added to a part's deadline so that, despite clock skew
// between nodes, parts are examined after their order's deadline.
const partGrace = time.Second

// commitTimeout bounds each step that ignores the caller's cancellation
// (detached).
const commitTimeout = 2 * time.Second

// detached is ctx's values without its cancellation or deadline, bounded
// by commitTimeout: the context of a step that must follow one that may
// have landed (a commit, a roll-back, a decision and its settles: the
// package doc's rule for a caller that gives up). Call cancel when done.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
}

// Reserve takes every item of an order, all or nothing, and holds it for
// ttl (0 = inventory.reservation_ttl; capped by max_reservation_ttl).
//
// Each item is taken from its route's nodes, the order's home node first
// when the route has it (for an order with a user, the user's quota node
// of the route first), then in Candidates(orderID+sku) order, up to what
// each node has, so an item may be split across nodes; drained and
// unusable nodes are skipped. An order whose items' first nodes are all
// its home node, and which that node can meet in full, is reserved by one
// script there (local.go). Nodes work concurrently, one
// round trip per node per round. If an item cannot be met, a node fails,
// or the per-user limit would be exceeded, every part already taken is
// cancelled (a part whose outcome is unknown gets a tombstone, so a
// reserve still in flight takes nothing) and the error wraps
// [ErrInsufficientStock] (naming the SKU), [ErrLimitExceeded] or
// [ErrUnavailable]. An order of a user that wants more of a SKU than its
// per-user limit is refused with [ErrLimitExceeded] whatever that SKU's
// stock (when another of its items is short, it may be refused with
// [ErrInsufficientStock] instead: the first refusal found answers, in
// item order, and a path that checks stock before quotas finds the short
// item first), and so is an order without a user of a SKU with a per-user limit (the
// message says it needs user_id): the same order is valid for a SKU
// without a limit, so it is the SKU's state that refuses it, not a
// malformed request. A SKU never loaded on its route is refused with
// [ErrUnknownSKU] (when the read-only check can tell, see its doc), a
// malformed request with [ErrInvalid].
//
// Reserve is idempotent per order id: a retry, even concurrent, of an order
// that succeeded returns the same receipts and takes nothing more; a
// concurrent retry waits for the running attempt. An order id that was
// cancelled, or tombstoned by a Cancel that came first, is refused with
// [ErrCancelled]; reuse with different items with [ErrOrderMismatch].
func (inv *Inventory) Reserve(ctx context.Context, orderID string, items []Item, userID string, ttl time.Duration) (Reservation, error) {
	res, err := inv.reserve(ctx, orderID, items, userID, ttl)
	inv.stats.reserve(err)
	if err == nil {
		res.TTL, res.TTLCapped = inv.effectiveTTL(ttl)
	}
	return res, err
}

// effectiveTTL returns the hold time Reserve applies for ttl (≥ 0) and
// whether it was capped: whole milliseconds, as the scripts hold it, and
// at least one (a ttl under 1ms was held 0ms, its deadline its start,
// while the reservation reported the ttl asked for: found by a review).
func (inv *Inventory) effectiveTTL(ttl time.Duration) (time.Duration, bool) {
	capped := false
	switch {
	case ttl == 0:
		ttl = inv.cfg.ReservationTTL
	case ttl > inv.cfg.MaxReservationTTL:
		ttl, capped = inv.cfg.MaxReservationTTL, true
	}
	return max(ttl.Truncate(time.Millisecond), time.Millisecond), capped
}

// reserve places the order by the first path that can: one script on
// its home, one round, or the general path, with refusals by reads alone
// before or between them. Following a Reserve, the files a reader opens,
// path by path:
//
//   - Every path: internal/service/handlers.go (Handlers.Reserve: the
//     RPC's checks, the items converted), then this file (Reserve,
//     reserve: the request's checks, the TTL; the order's home,
//     homes.go homeFor, whose record migrate.go moves mid-migration).
//   - Refusals by reads alone, nothing written: reserve_plan.go
//     (refuseShort, before the paths when a SKU of the order was refused
//     lately, and after a path found a part short; its reads, and the
//     nodes each item may take from; the rule is soldout.go's, which SKUs
//     were refused soldout_hint.go).
//   - One script on the home: local.go (reserveLocal: the call's keys and
//     arguments, the record's template from rectemplate.go), script_run.go
//     run and the group call that carries it (group.go; its queue batchq.go),
//     the script lua/local.lua over the library lua/take_whole.lua and
//     lua/prelude.lua, back to local.go (decodeLocal, with reply.go's
//     reader), then receipts in this file.
//   - One round: staged_reserve.go (plan, stage and takes at once, the
//     outcome; the protocol's states and rule are in staged.go), the home's
//     stage in stage_call.go (lua/stage_take.lua) and the other nodes'
//     takes in reserve_call.go (lua/reserve.lua), sent in one round
//     (round.go) through group.go;
//     then the commit, carried on a later group call (carry.go), or the
//     release of an attempt that failed (order_ops.go: releaseStaged).
//   - The general path (order_ops.go: reserveGeneral): begin and commit on
//     the record (orderOp there, lua/order.lua) around the takes (take.go,
//     reserve_call.go, a round each: round.go).
func (inv *Inventory) reserve(ctx context.Context, orderID string, items []Item, userID string, ttl time.Duration) (Reservation, error) {
	ctx, _ = inv.pin(ctx)
	if err := inv.checkReserve(ctx, orderID, items, userID); err != nil {
		return Reservation{}, err
	}
	if ttl < 0 {
		return Reservation{}, fmt.Errorf("%w: ttl is negative (%v)", ErrInvalid, ttl)
	}
	ttl, _ = inv.effectiveTTL(ttl)
	home, err := inv.homeFor(ctx, orderID)
	if err != nil {
		return Reservation{}, err
	}
	// Refusals without a write (soldout.go): read first when a SKU of the
	// order was refused lately, or has a per-user limit and the order's
	// quota parts are on several nodes, and once a first path found a part
	// short.
	checked := inv.soldOut.any(items) || (userID != "" && inv.limited.any(items) && inv.spreadQuotas(ctx, items, userID))
	if checked {
		if err := inv.refuseShort(ctx, home, orderID, items, userID); err != nil {
			return Reservation{}, err
		}
	}
	res, ok, lerr := inv.reserveLocal(ctx, home, orderID, items, userID, ttl)
	if ok {
		return res, lerr
	}
	var serr error
	var settled string        // a failed one-round attempt whose parts this call cancelled (unwindStaged)
	if lerr != errHasRecord { // a retry of a known order: the general path answers it
		if lerr == errShortSeen && !checked {
			checked = true
			if err := inv.refuseShort(ctx, home, orderID, items, userID); err != nil {
				return Reservation{}, err
			}
		}
		res, ok, serr = inv.reserveStaged(ctx, home, orderID, items, userID, ttl, &settled)
		if ok {
			return res, serr
		}
		if serr == errShortSeen {
			// Its round found a part short (after a check, if any): read
			// before the general path takes across nodes.
			serr = nil
			if err := inv.refuseShort(ctx, home, orderID, items, userID); err != nil {
				return Reservation{}, err
			}
		}
	}
	res, err = inv.reserveGeneral(ctx, home, orderID, items, userID, ttl, settled)
	if err != nil && serr != nil {
		// Say why the first choices were not enough too (a node that timed
		// out there is down by now, and the general path only says so).
		err = fmt.Errorf("%w; the one-round attempt before it: %v", err, serr)
	}
	return res, err
}

func (inv *Inventory) checkReserve(ctx context.Context, orderID string, items []Item, userID string) error {
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
		if _, err := inv.set(ctx, it.Route); err != nil {
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

// receipts is a Receipt per stock part of parts in item order, as
// [Reservation.Receipts] promises (the parts of one item, split over
// nodes by the general path, in their order in parts), in one allocation
// of the exact size (appending to nil would grow it once per part of a
// several-item order). Every path's receipts are made here: the parts
// come in the order their takes came back, node by node, or their record
// lists them.
func receipts(parts []part) []Receipt {
	n := 0
	for _, p := range parts {
		if p.Kind == PartStock {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]Receipt, 0, n)
	for _, p := range parts {
		if p.Kind == PartStock {
			out = append(out, Receipt{ItemIndex: p.Item, SKU: p.SKU, Quantity: p.Qty, Node: p.Node, RedoLog: p.Redo, Offset: p.Offset})
		}
	}
	slices.SortStableFunc(out, func(a, b Receipt) int { return cmp.Compare(a.ItemIndex, b.ItemIndex) })
	return out
}

// newToken names one reserve attempt: 48 random bits in 8 characters of
// base64url (A–Z a–z 0–9 - _; never '|', the part id's separator, nor a
// control byte). The token is in every part id of the attempt (keys and
// index members), so its length is memory on the nodes: as 12 hex digits
// it made a short order id's part key 4 bytes longer, one allocator size
// class up.
func newToken() string {
	var b [8]byte
	randomFill(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:6])
}

// randomFill fills b with random bytes from the runtime's generator
// (math/rand/v2's top-level functions: a ChaCha8 stream per thread,
// seeded from the operating system's entropy, never from a fixed seed).
// Its bytes are as unpredictable, and as unlikely to repeat across
// processes and machines, as crypto/rand's, which is what the tokens and
// minted order ids need of them (uniqueness, not secrecy: neither is a
// credential); unlike crypto/rand's, reading them makes no system call
// (getrandom cost a minted reserve about 0.2 µs of its client's 10 µs).
// len(b) must be a multiple of 8.
func randomFill(b []byte) {
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rand.Uint64())
	}
}

func checkID(field, v string) error {
	if p := idProblem(v); p != "" {
		return fmt.Errorf("%w: %s %s", ErrInvalid, field, p)
	}
	return nil
}

// set returns the node set of route in the view ctx acts on. A route of
// the configuration that the applied topology lacks is refused with
// [ErrNotApplied]; one of neither with [ErrInvalid].
func (inv *Inventory) set(ctx context.Context, route string) (*router.Set, error) {
	return inv.setIn(inv.topology(ctx), route)
}

// setIn is set in view v.
func (inv *Inventory) setIn(v *view, route string) (*router.Set, error) {
	if s := v.routes[route]; s != nil {
		return s, nil
	}
	if _, ok := inv.cfgSets[route]; !ok {
		return nil, fmt.Errorf("%w: route_key %q is not a route of server %q", ErrInvalid, route, inv.cfg.Server)
	}
	if v.notReady != nil {
		return nil, v.notReady
	}
	return nil, fmt.Errorf("%w: %w: route %q is not in the applied topology (epoch %d): run `shardis topology apply`",
		ErrInvalid, ErrNotApplied, route, v.epoch)
}
