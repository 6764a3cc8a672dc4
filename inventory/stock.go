package inventory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// StockLevel is a SKU's counters summed over its route's reachable nodes.
type StockLevel struct {
	SKU       string // the SKU, as asked for
	Available int64  // units that a Reserve may take
	Reserved  int64  // units held by reservations not yet confirmed or cancelled
	Confirmed int64  // units of confirmed orders (sold)
	// Loaded is everything added by LoadStock on reachable nodes, net of
	// the units topology transfers moved between nodes:
	// Available+Reserved+Confirmed == Loaded on each node, always.
	Loaded int64
	// Limit is the per-user limit (0 = none), as the first reachable node
	// holding the SKU reports it.
	Limit int64
	// Nodes has one entry per node of the route, in configuration order.
	Nodes []NodeStock
}

// NodeStock is one node's counters of a SKU (as StockLevel's, for this
// node only; zero when the node is not reachable).
type NodeStock struct {
	Node      string // the node's name
	Reachable bool   // false when the node could not be read
	// Err says why the node is not reachable, or, with Reachable true,
	// that the node's counters are not to be trusted: the SKU's stock
	// hash is missing there while pending parts hold units of it (wraps
	// [ErrStockMissing]; see MissingParts). Nil otherwise.
	Err       error
	Available int64 // units on this node that a Reserve may take
	Reserved  int64 // units on this node held by reservations not yet confirmed or cancelled
	Confirmed int64 // units on this node of confirmed orders (sold)
	Loaded    int64 // units loaded into this node (net of topology transfers): Available+Reserved+Confirmed
	Limit     int64 // the per-user limit this node holds (0 = none)
	// MissingParts is how many pending parts on the node reference the
	// SKU's stock hash while it does not exist there (a lower bound, see
	// missing.go); 0 when the hash exists.
	MissingParts int64
}

// LoadStock adds qty units of sku to route, split evenly over the route's
// enabled, usable nodes (the remainder goes to the first nodes in the ring
// order of sku), and sets the per-user limit (units one user may hold
// reserved plus confirmed) on every node of the route: perUserLimit > 0
// sets it, 0 removes it, < 0 keeps the current one (restocking). Changing
// the limit needs every node of the route usable, so no node can miss it:
// otherwise nothing is changed and the error names the nodes that are not
// (a perUserLimit every reachable node already holds is no change, and
// loads like a restock). A node that fails during the call is named in the
// error; a limit change it missed is recorded on the nodes that took it and
// reaches it when it returns (the reconciler's ConvergeLimits, limits.go),
// as is a limit every usable node already held, passed over on one that
// is not usable (limitReaches), which may hold another.
// Each change carries a version (nextLimitVersion: the latest clock of the
// route's usable nodes, ms, raised above every version they hold; never
// the calling process's clock while a node's can be read) and a node keeps
// the limit of the highest version it was sent, so two racing changes end
// at the later one everywhere, and a change made after another one
// answered outranks it whatever the two instances' clocks say (one that
// passes over a node that is not usable, within the nodes' clock skew of
// an earlier change that reached that node alone, excepted: limits.go): a change
// older than one a node holds is not applied there, and the level
// returned shows the limit in effect. It returns the stock after loading.
//
// Parts of the SKU set aside as stuck on the nodes that took the load are
// retried at once (stuck.go): loading is often what follows a repair.
//
// A qty of 0 with perUserLimit >= 0 changes only the limit (no stock is
// added; every node of the route takes the limit as above); a qty of 0
// without a limit is refused (ErrInvalid).
//
// LoadStock is not idempotent: retrying after an error may add twice.
// When a node fails during the call and another node added its share, or
// the failed node may have (its outcome unknown: a timeout, a connection
// cut), the error wraps [ErrPartlyApplied] and [ErrUnavailable], and the
// message names the nodes that added their share and says that a retry
// adds again: read GetStock and load what is missing. Every load call
// carries a deadline by its node's clock past which it adds nothing
// (load_deadline.go), and when a share's outcome is unknown LoadStock
// waits until none of its calls can land any more (about 4 s) before it
// reads the stock back and answers, so that read, and any after it, shows
// all the load added; a caller whose context ends first is told until
// when to wait. When every node
// took its share but reading the stock back failed (a corrupt value on a
// node the load skipped), the error wraps ErrPartlyApplied and the read's
// error, and says every unit was added. Without ErrPartlyApplied no unit
// was added, and the error keeps the class of the nodes' failures: when
// every failed node could not serve for now (each failure wraps
// ErrUnavailable: down, unreachable, out of memory, at another topology
// epoch), it wraps ErrUnavailable and says the same call may be retried;
// when any node refused the load for good (a corrupt value, [ErrCorrupt];
// stock that would pass 2^53, [ErrInvalid]; a failed script,
// [ErrScriptFailed]; any failure not wrapping ErrUnavailable), the
// permanent refusal wins: the error wraps those nodes' errors, not
// ErrUnavailable, and says a retry meets the same refusal (it is
// permanent until the node's data or the request changes).
func (inv *Inventory) LoadStock(ctx context.Context, route, sku string, qty, perUserLimit int64) (StockLevel, error) {
	perUserLimit, err := checkLoad(sku, qty, perUserLimit)
	if err != nil {
		return StockLevel{}, err
	}
	ctx, _ = inv.pin(ctx)
	set, err := inv.set(ctx, route)
	if err != nil {
		return StockLevel{}, err
	}
	targets := set.Spread(sku, nil, inv.usable)
	if len(targets) == 0 && qty > 0 {
		// (a limit-only change needs no target: every node of the route
		// takes it, drained ones too, and limitReaches needs each usable)
		return StockLevel{}, fmt.Errorf("%w: route %q has no usable node: %s", ErrUnavailable, route, inv.unusableNodes(set))
	}
	mustReach := false // a limit change every node of the route must take (or be named failed)
	if perUserLimit >= 0 {
		unchanged, err := inv.limitReaches(ctx, set, route, sku, perUserLimit)
		if err != nil {
			return StockLevel{}, err
		}
		mustReach = !unchanged
	}
	ver := inv.limitVersion()
	if perUserLimit >= 0 {
		ver = inv.nextLimitVersion(ctx, set, stockKey(route, sku))
	}
	share := shares(targets, qty)
	began := time.Now() // before loadShares reads the nodes' clocks
	took, failed, maybe, inFlight := inv.loadShares(ctx, set, stockKey(route, sku), share, perUserLimit, ver, mustReach)
	if perUserLimit > 0 {
		inv.limited.mark(stockRef{route, sku}) // soldout.go, "Per-user limits"
	}
	inv.retryStuckOf(ctx, took, route, sku)
	// A change limitReaches found unchanged passed over the nodes that are
	// not usable (!mustReach: there is one) yet stamped the nodes it
	// reached with version ver; a node passed over may hold another limit
	// all the same (an earlier change that failed midway reached it, and
	// its record there could no longer bring the others to it, ver being
	// newer): it is recorded as a change that missed them, so the
	// reconciler brings them to it (TestLimitUnchangedPassOverKeepsNoSplit:
	// before, the route kept two limits for good).
	if perUserLimit >= 0 && (len(failed) > 0 || !mustReach) {
		inv.recordLimitTodo(context.WithoutCancel(ctx), took, route, sku, perUserLimit, ver)
	}
	settled := !inFlight || awaitLoadSettled(ctx, began) // (load_deadline.go)
	level, gerr := inv.GetStock(ctx, route, sku)
	if len(failed) > 0 {
		what := ""
		if perUserLimit >= 0 {
			what = fmt.Sprintf("; the per-user limit %d reached %d of %d nodes, the others take it when they return (reconciler)",
				perUserLimit, len(took), len(set.Nodes()))
		}
		names := make([]string, len(took))
		for i, n := range took {
			names[i] = n.Name()
		}
		return level, loadFailed(route, sku, qty, share, names, failed, maybe, lateAdvice(strings.Join(maybe, ", "), began, inFlight, settled), what)
	}
	if gerr != nil && qty > 0 {
		// Every target took its share; a node of the route read
		// afterwards (one the load skipped, drained or not usable then)
		// refused the read. The units are in: say so, or a retry adds
		// them twice.
		return level, fmt.Errorf("%w: load of sku %q (route %q): all %d units were added (a retry adds them again), "+
			"but reading the stock back failed: %w", ErrPartlyApplied, sku, route, qty, gerr)
	}
	return level, gerr
}

// loadFailed is the error of a load of share (units by node name) that
// failed on the nodes failed (one error each, naming the node: loadShares)
// while the nodes named took took it and those named maybe, failed
// targets, may have added their share; late is what is said of those
// (lateAdvice), what what is said of the limit. It
// wraps ErrPartlyApplied and ErrUnavailable when some unit was, or may
// have been, added (LoadStock). Before, a partly applied load answered
// ErrUnavailable alone, which an RPC client reads as "retry the same
// call" (gRPC's unavailable): the retry added the shares of the nodes that
// took them twice. When no unit was added it is nothingAdded.
func loadFailed(route, sku string, qty int64, share map[string]int64, took []string, failed []error, maybe []string, late, what string) error {
	msg := fmt.Sprintf("load of sku %q (route %q) failed on %d node(s): %v%s", sku, route, len(failed), failed, what)
	var added []string
	var units int64
	for _, name := range took {
		if sh := share[name]; sh > 0 {
			added = append(added, fmt.Sprintf("%s (%d)", name, sh))
			units += sh
		}
	}
	if len(added) == 0 && len(maybe) == 0 {
		return nothingAdded(msg, failed)
	}
	if len(added) > 0 {
		msg += fmt.Sprintf("; %d of %d units were added, on %s", units, qty, strings.Join(added, ", "))
	}
	if len(maybe) > 0 {
		msg += late
	}
	return partlyApplied{msg + ": a retry of the same call adds them again; read GetStock and load only what is missing"}
}

// nothingAdded is loadFailed's error when no unit was added, msg saying
// what failed. When every failure wraps ErrUnavailable (the node could
// not serve now) it wraps ErrUnavailable and the failures, and says the
// same call may be retried. Otherwise a node refused the load for good
// (ErrCorrupt, ErrInvalid from SHARDIS_RANGE, ErrScriptFailed …): it
// wraps those failures only, whose classes the caller reads (errors.Is;
// the service answers internal for a corrupt value, as Reserve and
// GetStock do on the same data), and says a retry meets the same refusal.
// Before, it wrapped ErrUnavailable alone and invited the retry: the
// service answered unavailable, which retry policies retry forever.
func nothingAdded(msg string, failed []error) error {
	var refused []error
	for _, err := range failed {
		if !errors.Is(err, ErrUnavailable) {
			refused = append(refused, err)
		}
	}
	if len(refused) == 0 {
		return loadError{msg: ErrUnavailable.Error() + ": " + msg + "; no unit was added: the same call may be retried",
			errs: append([]error{ErrUnavailable}, failed...)}
	}
	return loadError{msg: msg + fmt.Sprintf("; no unit was added, and a retry of the same call meets the same refusal on %d node(s)", len(refused)),
		errs: refused}
}

// loadError is a load's error that reads msg and wraps errs.
type loadError struct {
	msg  string
	errs []error
}

func (e loadError) Error() string   { return e.msg }
func (e loadError) Unwrap() []error { return e.errs }

// partlyApplied is loadFailed's error when units were added: it wraps
// ErrPartlyApplied and ErrUnavailable and reads "partly applied: msg".
type partlyApplied struct{ msg string }

func (e partlyApplied) Error() string   { return ErrPartlyApplied.Error() + ": " + e.msg }
func (e partlyApplied) Unwrap() []error { return []error{ErrPartlyApplied, ErrUnavailable} }

// checkLoad checks LoadStock's arguments and returns the per-user limit
// as the load script takes it (-1: leave as is). A quantity of 0 is a
// change of the limit alone, so it needs a limit (>= 0).
func checkLoad(sku string, qty, perUserLimit int64) (int64, error) {
	if err := checkID("sku_id", sku); err != nil {
		return 0, err
	}
	if qty == 0 && perUserLimit < 0 {
		return 0, fmt.Errorf("%w: quantity is 0 and per_user_limit is not given or negative (keep the limit): nothing to change "+
			"(quantity 1..%d adds stock; quantity 0 with a per_user_limit of 0 or more changes only the limit)", ErrInvalid, MaxQuantity)
	}
	if err := checkQty("quantity", qty); err != nil && qty != 0 {
		return 0, err
	}
	if perUserLimit > MaxQuantity {
		return 0, fmt.Errorf("%w: per_user_limit is %d, at most %d", ErrInvalid, perUserLimit, MaxQuantity)
	}
	return max(perUserLimit, -1), nil
}

// limitReaches refuses a per-user limit change that cannot reach every
// node of the route (one is not usable), unless the limit is already
// limit everywhere it can be read: then it reports unchanged (the nodes
// that are not usable may be passed over, they hold it too).
func (inv *Inventory) limitReaches(ctx context.Context, set *router.Set, route, sku string, limit int64) (unchanged bool, err error) {
	var down []string
	for _, n := range set.Nodes() {
		if !inv.usable(n) {
			down = append(down, n.Name())
		}
	}
	if len(down) == 0 {
		return false, nil
	}
	if !inv.limitIs(ctx, route, sku, limit) {
		return false, fmt.Errorf("%w: a per-user limit change (to %d) must reach every node of route %q; unavailable: %s (nothing changed)",
			ErrUnavailable, limit, route, strings.Join(down, ", "))
	}
	return true, nil
}

// shares splits qty over targets as evenly as it goes (the first ones
// take the remainder), by node name.
func shares(targets []*node.Node, qty int64) map[string]int64 {
	share := map[string]int64{}
	k := int64(len(targets))
	for i, n := range targets {
		share[n.Name()] = qty / k
		if int64(i) < qty%k {
			share[n.Name()]++
		}
	}
	return share
}

// loadShares runs the load script on every node of set at once: each
// target adds its share, and every other usable node takes the limit
// (limitArg at version ver). It returns the nodes that took it, an error
// per node that failed (its text a line naming the node and its share,
// wrapping the node's error, or ErrUnavailable for a node passed over as
// not usable), and the targets among those whose call may have
// run all the same (outcomeUnknown: a timeout, a connection cut), so
// their share may be on the node, inFlight telling whether one of those
// calls may still be on its way (mayStillLand). With mustReach, a node that is neither a
// target (drained for the route) nor usable any longer is one that failed:
// limitReaches found every node usable, and a drained node still keeps the
// quota counters of the users it owns in the route (quotaNode), so a
// limit change it missed must be named and recorded (recordLimitTodo), not
// passed over.
func (inv *Inventory) loadShares(ctx context.Context, set *router.Set, key string, share map[string]int64, limitArg, ver int64, mustReach bool) (took []*node.Node, failed []error, maybe []string, inFlight bool) {
	var calls []scriptCall
	for _, n := range set.Nodes() {
		add, isTarget := share[n.Name()]
		if !isTarget && !inv.usable(n) {
			if mustReach && limitArg >= 0 {
				failed = append(failed, loadError{msg: fmt.Sprintf("%s (limit only): %s", n.Name(), inv.unusableReason(n)),
					errs: []error{ErrUnavailable}})
			}
			continue
		}
		calls = append(calls, scriptCall{n: n, s: loadScript, keys: []string{key}, args: []any{add, limitArg, ver}})
	}
	// each call carries its deadline by its node's clock (load_deadline.go)
	due, clockErrs := loadDeadlines(ctx, calls)
	sent := calls[:0]
	for k, c := range calls {
		if clockErrs[k] != nil {
			failed = append(failed, fmt.Errorf("%s (share %v): not sent, its clock could not be read: %w", c.n.Name(), c.args[0], clockErrs[k]))
			continue
		}
		c.args = append(c.args, due[k])
		sent = append(sent, c)
	}
	calls = sent
	for k, r := range inv.sendRound(ctx, calls, make([]callReply, 0, len(calls))) {
		if r.err != nil {
			failed = append(failed, fmt.Errorf("%s (share %v): %w", calls[k].n.Name(), calls[k].args[0], r.err))
			if share[calls[k].n.Name()] > 0 && outcomeUnknown(r.err) {
				maybe = append(maybe, calls[k].n.Name())
				inFlight = inFlight || mayStillLand(r.err)
			}
			continue
		}
		took = append(took, calls[k].n)
	}
	return took, failed, maybe, inFlight
}

// limitIs reports whether every node of route that answers holds limit as
// sku's per-user limit (a SKU a node does not hold has limit 0). Limit
// changes reach every node or none (LoadStock), so a node that does not
// answer holds it too, unless a change failed on it midway, which
// LoadStock reported.
func (inv *Inventory) limitIs(ctx context.Context, route, sku string, limit int64) bool {
	lvl, err := inv.GetStock(ctx, route, sku)
	if err != nil {
		return false
	}
	seen := false
	for _, ns := range lvl.Nodes {
		if ns.Reachable {
			seen = true
			if ns.Limit != limit {
				return false
			}
		}
	}
	return seen
}

// GetStock returns the SKU's counters on every node of route. An
// unreachable node is flagged in its NodeStock, not an error, and so is a
// node whose stock hash of the SKU is missing while pending parts there
// reference it (Err wraps [ErrStockMissing], missing.go); a node holding a
// corrupt value is an error wrapping [ErrCorrupt].
func (inv *Inventory) GetStock(ctx context.Context, route, sku string) (StockLevel, error) {
	if err := checkID("sku_id", sku); err != nil {
		return StockLevel{}, err
	}
	ctx, _ = inv.pin(ctx)
	set, err := inv.set(ctx, route)
	if err != nil {
		return StockLevel{}, err
	}
	nodes := set.Nodes()
	out := StockLevel{SKU: sku, Nodes: make([]NodeStock, len(nodes))}
	key := stockKey(route, sku)
	exists := make([]bool, len(nodes))
	calls := make([]scriptCall, len(nodes))
	for i, n := range nodes {
		calls[i] = scriptCall{n: n, s: stockScript, keys: []string{key}}
	}
	for i, r := range inv.sendRound(ctx, calls, make([]callReply, 0, len(calls))) {
		n := nodes[i]
		ns := NodeStock{Node: n.Name()}
		var v []int64
		err := r.err
		if err == nil {
			v, err = asInt64s(n, stockScript, r.v)
		}
		if err == nil && len(v) != 6 {
			err = malformed(n, stockScript, r.v, "a list of 6 integers {available, reserved, confirmed, loaded, limit, exists}")
		}
		if err != nil {
			ns.Err = err
		} else {
			ns.Reachable = true
			ns.Available, ns.Reserved, ns.Confirmed, ns.Loaded, ns.Limit = v[0], v[1], v[2], v[3], v[4]
			exists[i] = v[5] == 1
		}
		out.Nodes[i] = ns
	}
	inv.flagMissing(ctx, nodes, route, sku, exists, out.Nodes)
	limitRead := false
	for i, ns := range out.Nodes {
		if ns.Err != nil && (errors.Is(ns.Err, ErrCorrupt) || errors.Is(ns.Err, ErrMalformedReply)) {
			return out, ns.Err
		}
		out.Available += ns.Available
		out.Reserved += ns.Reserved
		out.Confirmed += ns.Confirmed
		out.Loaded += ns.Loaded
		if !limitRead && ns.Reachable && exists[i] {
			out.Limit, limitRead = ns.Limit, true // the first reachable node holding the SKU, 0 included
		}
	}
	return out, nil
}
