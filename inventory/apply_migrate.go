package inventory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// Relocate implements [topology.Driver]: at c.Token, it moves every order
// record whose home moved (moveOrders) and then decides every record still
// staging (decideStaging). The view it acts on is reread first; it must be
// at c.Token.
func (a *migrator) Relocate(ctx context.Context, c topology.Change) (topology.Moved, bool, error) {
	a.begin(c)
	v := a.inv.resync(ctx, a.inv.topo.cur.Load())
	if err := v.refuse(); err != nil {
		return a.moved, false, err
	}
	if v.token != c.Token {
		return a.moved, false, fmt.Errorf("%w: %w: the nodes moved on to %s while applying %s", ErrUnavailable, ErrTopology, v.token, c.Token)
	}
	if !v.migrating() {
		return a.moved, false, nil // a node is stable at c.Token: step 3 ran to its end
	}
	if err := a.moveOrders(ctx, v); err != nil {
		return a.moved, true, err
	}
	err := a.decideStaging(ctx, v)
	return a.moved, true, err
}

// MoveCounters implements [topology.Driver]: one pass of moveCounters,
// then settleLeaving; what waits is the counters that could not move and
// the parts still pending (or set aside) on leaving nodes. The parts
// count whatever their route: a route removed in the same apply moves no
// counter, so its parts on a node that leaves would otherwise not be
// waited for, and once stable no instance reaches the node to settle
// them (their units reserved there for good: found by a review). A part
// there that cannot be settled is set aside and listed in the Moved's
// SetAside (apply_leaving.go). When settleLeaving settled a part while
// counters waited, moveCounters runs again: the counters those parts held
// move in the same pass, and the count returned is the one after the
// settle (it was the one before, so an apply whose Wait passed during the
// pass that settled the last part ended migrating with nothing left to
// wait for).
func (a *migrator) MoveCounters(ctx context.Context, c topology.Change) (topology.Moved, int, error) {
	a.begin(c)
	busy, err := a.moveCounters(ctx)
	if err != nil {
		return a.moved, 0, err
	}
	settled := a.moved.PartsSettled
	if err = a.settleLeaving(ctx); err != nil {
		return a.moved, busy, err
	}
	if busy > 0 && a.moved.PartsSettled > settled {
		if busy, err = a.moveCounters(ctx); err != nil {
			return a.moved, 0, err
		}
	}
	left, err := a.leftPending(ctx)
	return a.moved, busy + left, err
}

// leftPending counts the parts still pending or set aside on the leaving
// nodes.
func (a *migrator) leftPending(ctx context.Context) (int, error) {
	total := 0
	for _, name := range a.c.Left {
		n, err := a.node(name)
		if err != nil {
			return 0, err
		}
		var pend, stuck *redis.IntCmd
		if _, err := n.Client().Pipelined(ctx, func(p redis.Pipeliner) error {
			pend, stuck = p.ZCard(ctx, PendingKey), p.ZCard(ctx, keyStuck)
			return nil
		}); err != nil {
			return 0, fmt.Errorf("%w: node %s: counting its pending parts: %v", ErrUnavailable, name, err)
		}
		total += int(pend.Val() + stuck.Val())
	}
	return total, nil
}

// moveOrders sweeps every old member (leaving ones first) for order
// records whose home moved, and moves them.
func (a *migrator) moveOrders(ctx context.Context, v *view) error {
	names := append(append([]string(nil), a.c.Left...), a.c.From.Nodes()...)
	done := map[string]bool{}
	for _, name := range names {
		if done[name] {
			continue
		}
		done[name] = true
		n, err := a.node(name)
		if err != nil {
			return err
		}
		keys, err := scan(ctx, n, orderKeyPrefix+"*")
		if err != nil {
			return err
		}
		for _, k := range keys {
			id := k[len(orderKeyPrefix):]
			if v.prevHomes.Home(id) != name {
				continue // not homed here in the previous epoch
			}
			home := v.members[v.homes.member(id)]
			if home.Name() == name {
				continue
			}
			installed, err := a.inv.moveOrder(ctx, v, id, name, home)
			if err != nil {
				return fmt.Errorf("moving order %q from %s to %s: %w", id, name, home.Name(), err)
			}
			if installed { // a rerun counts only what it moved itself
				a.moved.OrdersMoved++
			}
		}
	}
	return nil
}

// decideStaging decides every order record still staging (a one-round
// reservation whose attempt died before its commit, staged.go) by
// resolveStaged in prevent mode, at the record's home in the new topology
// (moveOrders ran first). It must run before the first node is marked
// stable, because a staging record may promise a part on a node that
// leaves, and no instance of the new topology can reach that node to
// probe it: it would stay staging for good, its parts reserved (safety
// issue item A2). Why this finds every one and why deciding it is safe:
//   - a record is staged only in a stable epoch (reserveStaged), so once
//     every node is at the new token no record can become staging until
//     the first node is marked stable (this step runs in between, and
//     every rerun of the apply runs it again before stable);
//   - the previous epoch's records are on its members, so their sweep
//     lists every staging record (a copy marked moved names the order; the
//     live record is then at its new home, where it is read);
//   - no script of the previous epoch runs any more, so the attempt can
//     take nothing: preventing its absent parts cuts short nothing that
//     could still succeed. The read is a plain read, possibly stale by the
//     time it is used: resolveStaged's decisions are compare-and-set on
//     the record's token (the loser follows the record) and its
//     tombstones name only that token's parts, so a record decided
//     meanwhile is left as it is.
//
// A committed record's parts on a leaving node stay pending and are
// settled by settleLeaving after their deadline; a failed one's parts are
// cancelled now, so the leaving node's stock can move.
func (a *migrator) decideStaging(ctx context.Context, v *view) error {
	if a.inv.mutated(MutationApplyLeavesStaging) {
		return nil // test-only (faults.go): item A2's bug re-introduced
	}
	ids, err := a.stagingOrders(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		home, err := a.node(v.members[v.homes.member(id)].Name())
		if err != nil {
			return err
		}
		rec, ok, err := readStaging(ctx, home, id)
		if err != nil {
			return err
		}
		if !ok {
			continue // decided meanwhile, or never installed here
		}
		if err := a.inv.resolveStaged(ctx, home, id, rec, true); err != nil {
			return fmt.Errorf("deciding staged order %q on %s (run apply again to resume): %w", id, home.Name(), err)
		}
		a.moved.StagedDecided++
	}
	return nil
}

// stagingOrders returns, sorted, the ids of the order records whose status
// is staging on a member of the previous topology (moved copies
// included).
func (a *migrator) stagingOrders(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	var ids []string
	for _, name := range topology.Union(a.c.Left, a.c.From.Nodes()) {
		n, err := a.node(name)
		if err != nil {
			return nil, err
		}
		keys, err := scan(ctx, n, orderKeyPrefix+"*")
		if err != nil {
			return nil, err
		}
		for i, k := range keys {
			keys[i] = k[len(orderKeyPrefix):]
		}
		err = readOrders(ctx, n, keys, func(id string, f map[string]string) {
			if recStatus(f["status"]) == recStaging && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// readStaging reads order id's record on n: ok is false unless it is a
// live (not moved) staging record; rec then holds its token and promised
// parts.
func readStaging(ctx context.Context, n *node.Node, id string) (rec orderRecord, ok bool, err error) {
	f, err := ReadOrder(ctx, n.Client(), id).Fields()
	if err != nil {
		return rec, false, fmt.Errorf("%w: node %s: %w", ErrUnavailable, n.Name(), err)
	}
	if recStatus(f["status"]) != recStaging || f["moved"] != "" {
		return rec, false, nil
	}
	rec.status, rec.token = recStaging, f["token"]
	if rec.parts, err = unmarshalOrderParts(id, f["parts"]); err != nil {
		return rec, false, fmt.Errorf("node %s: order %q holds unreadable parts: %w", n.Name(), id, err)
	}
	return rec, true, nil
}

// moveCounters transfers quota counters whose home moved and the stock
// of every node that leaves a route (the server, or only that route: a
// node that stays for another route is no node of this one any more, so
// no instance takes or loads the route's stock there, and units left on
// it would be stranded). It returns how many could not move yet because
// pending parts still count them.
func (a *migrator) moveCounters(ctx context.Context) (busy int, err error) {
	for route, oldMs := range a.c.From.Routes {
		newMs, ok := a.c.To.Routes[route]
		if !ok {
			if err := a.markRemoved(ctx, route, oldMs); err != nil {
				return 0, err
			}
			a.log.Warn("topology: route removed: its counters stay on its old nodes (adding it back over other nodes or weights is refused while they are there)", "route", route)
			continue
		}
		ring, err := router.NewRing(newMs)
		if err != nil {
			return 0, err
		}
		if sameMembers(oldMs, newMs) {
			continue
		}
		stays := membersOf(newMs)
		for _, m := range oldMs {
			n, err := a.node(m.Name)
			if err != nil {
				return 0, err
			}
			b, err := a.moveQuotas(ctx, route, n, ring, a.inv.transfer)
			if err != nil {
				return 0, err
			}
			busy += len(b)
			if a.leaves(m.Name, stays) {
				b, err := a.moveStock(ctx, route, n, ring, a.inv.transfer)
				if err != nil {
					return 0, err
				}
				busy += b
			}
		}
	}
	return busy, nil
}

// leaves reports whether the node named moves its stock of a route whose
// new members are stays: whether it is not one of them.
// [MutationStockLeftOnly] (test-only, faults.go) asks whether it leaves
// the server instead.
func (a *migrator) leaves(name string, stays map[string]bool) bool {
	if a.inv.mutated(MutationStockLeftOnly) {
		return slices.Contains(a.c.Left, name)
	}
	return !stays[name]
}

// xferSrc is the source of a transfer off n as its id names it: n's name,
// or none under [MutationXferNoSource] (test-only, faults.go).
func (a *migrator) xferSrc(n *node.Node) string {
	if a.inv.mutated(MutationXferNoSource) {
		return ""
	}
	return n.Name()
}

// mover carries one transfer of counter key off src to dst under id
// (Inventory.transfer; a move forward's takeBackAt): whether it moved
// it, or an error wrapping errXferBusy when the counter is held.
type mover func(ctx context.Context, kind xferKind, id, key string, src, dst *node.Node) (bool, error)

// moveQuotas moves, with move, the quota counters of route on n whose
// home in ring is another node; those pending parts count are busy (their
// keys returned).
func (a *migrator) moveQuotas(ctx context.Context, route string, n *node.Node, ring *router.Ring, move mover) (busy []string, err error) {
	held, err := pendingQuotaCounters(ctx, n)
	if err != nil {
		return nil, err
	}
	keys, err := scan(ctx, n, quotaKeyPrefix+route+":*")
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		_, user, ok := parseQuotaKey(route, k)
		if !ok {
			a.log.Warn("topology: unreadable quota key left in place", "node", n.Name(), "key", k)
			continue
		}
		home := ring.Name(ring.Home("user:" + user))
		if home == n.Name() {
			continue
		}
		if held[k] {
			busy = append(busy, k)
			continue
		}
		dst, err := a.node(home)
		if err != nil {
			return nil, err
		}
		moved, err := move(ctx, xferQuota, xferID(a.c.Epoch, xferQuota, a.xferSrc(n), k), k, n, dst)
		if err != nil {
			return nil, fmt.Errorf("moving %s from %s to %s: %w", k, n.Name(), home, err)
		}
		if moved {
			a.moved.QuotasMoved++
		}
	}
	return busy, nil
}

// moveStock moves, with move, every stock hash of route on n to its
// SKU's home in ring; those with reserved units are busy.
func (a *migrator) moveStock(ctx context.Context, route string, n *node.Node, ring *router.Ring, move mover) (busy int, err error) {
	keys, err := scan(ctx, n, stockKeyPrefix+route+":*")
	if err != nil {
		return 0, err
	}
	for _, k := range keys {
		sku := k[len(stockKey(route, "")):]
		dst, err := a.node(ring.Name(ring.Home(sku)))
		if err != nil {
			return 0, err
		}
		moved, err := move(ctx, xferStock, xferID(a.c.Epoch, xferStock, a.xferSrc(n), k), k, n, dst)
		if errors.Is(err, errXferBusy) {
			busy++
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("moving %s from %s to %s: %w", k, n.Name(), dst.Name(), err)
		}
		if moved { // a sold-out hash too: its confirmed and loaded units move
			a.moved.StockMoved++
		}
	}
	return busy, nil
}

// pendingQuotaCounters returns the quota counters that pending parts on n
// still count: those in its pending index, and those set aside (stuck.go:
// a part set aside is still pending, and its counter still counts it, so
// moved from under it, its cancel would decrement a counter no longer
// there while the new home kept its units for good).
func pendingQuotaCounters(ctx context.Context, n *node.Node) (map[string]bool, error) {
	// both indexes in one transaction: a stuck retry moving a part from
	// one to the other between two reads would hide it
	var pend, stuck *redis.StringSliceCmd
	if _, err := n.Client().TxPipelined(ctx, func(p redis.Pipeliner) error {
		pend, stuck = p.ZRange(ctx, PendingKey, 0, -1), p.ZRange(ctx, keyStuck, 0, -1)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("%w: node %s: %v", ErrUnavailable, n.Name(), err)
	}
	ids := append(pend.Val(), stuck.Val()...)
	// only quota parts count here, and they are indexed by their ids; a
	// stock part's member is its redo-log place, with no '|' ([PendingKey])
	ids = slices.DeleteFunc(ids, func(m string) bool { return !strings.Contains(m, "|") })
	out := map[string]bool{}
	const batch = 500
	for i := 0; i < len(ids); i += batch {
		pipe := n.Client().Pipeline()
		var reads []*PartRead
		for _, id := range ids[i:min(i+batch, len(ids))] {
			reads = append(reads, ReadPart(ctx, pipe, id))
		}
		_, _ = pipe.Exec(ctx) // each read's own error is checked below (ReadPart's layouts)
		for _, r := range reads {
			f, err := r.Fields()
			if err != nil {
				return nil, fmt.Errorf("%w: node %s: %v", ErrUnavailable, n.Name(), err)
			}
			if f["kind"] == "q" && f["counter"] != "" && f["state"] == string(PartPending) {
				out[f["counter"]] = true
			}
		}
	}
	return out, nil
}

// membersOf returns the names of ms as a set.
func membersOf(ms []router.Member) map[string]bool {
	out := make(map[string]bool, len(ms))
	for _, m := range ms {
		out[m.Name] = true
	}
	return out
}

func sameMembers(a, b []router.Member) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
