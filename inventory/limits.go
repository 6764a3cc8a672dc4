package inventory

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
)

// Per-user limit changes that did not reach every node of a route.
//
// LoadStock changes a SKU's limit on every node of its route, each with a
// version (the route's usable nodes' latest clock, ms, raised above the
// versions they hold: nextLimitVersion). When a node fails during the call,
// the nodes that took the change record it in `inv:limits:todo` (stock key
// → "limit:version:route"), and the error names the nodes that still
// differ. The reconciler (package rollback) calls ConvergeLimits on every pass:
// a node whose limit version is older takes the newer limit (a limit is
// only ever replaced by one of a higher version, or of the same version by
// a higher limit, in load.lua and limit_sync.lua alike, so two racing
// changes end at the later one everywhere), and the record is dropped once every node
// of the route holds it.

const keyLimitsTodo = "inv:limits:todo"

// limitSyncScript raises a stock hash's limit to a newer version. KEYS: 2
// stock hash. ARGV: 4 limit, 5 version. Returns the version the node held
// before.
var limitSyncScript = newScript("limit-sync", true, luaFile("limit_sync.lua"))

// limitTodoScript records (ARGV 4 = "stock key", 5 = "limit:version:route")
// or drops (ARGV 5 = "", 6 = the value the caller read: dropped only if the
// field still holds it) a pending limit change. KEYS: 2 the todo hash.
var limitTodoScript = newScript("limit-todo", true, luaFile("limit_todo.lua"))

// limitVersion is the version of a limit change made now, by this
// instance's clock alone: nextLimitVersion's when it can read no node's
// clock, and a load's that changes no limit.
func (inv *Inventory) limitVersion() int64 { return inv.limitClock().UnixMilli() }

// nextLimitVersion is the version of a limit change of stock key on the
// nodes of set made now: the latest clock (Redis TIME, ms) of the usable
// nodes of set, or one above the highest version such a node holds when
// that is higher; this instance's clock only when no node's clock could
// be read. A node keeps the highest version it was sent, so a version by
// the calling process's clock let a change made after another one had
// answered lose to it on every node, when the earlier change's instance
// ran ahead of this one's clock (by a second or two: SECURITY.md, "Clock
// skew"), while its LoadStock answered success. Raising it above the
// versions read mends that only where the earlier change's version can
// be read: a change that passed over a node that is not usable (the limit
// unchanged on the others, limitReaches) ranked below an earlier change,
// stamped by a clock running ahead, that reached that node alone, and the
// reconciler then took the earlier limit to every node
// (TestLimitSetBackWithANodeDownAfterAFastClocksChange). The nodes'
// clocks, each kept within a second of true time, decide instead (two
// changes further apart than the nodes' skew rank in the order they were
// made). A node whose version cannot be read is left out: its load fails
// as well and is reported and converged as any (a change that answered
// reached every node, so another node holds its version too).
func (inv *Inventory) nextLimitVersion(ctx context.Context, set *router.Set, key string) int64 {
	var (
		mu          sync.Mutex
		high, clock int64
	)
	nodes := set.Nodes()
	atOnce(len(nodes), func(i int) {
		if n := nodes[i]; inv.usable(n) {
			pipe := n.Client().Pipeline()
			ver, now := pipe.HGet(ctx, key, "limit_ver"), pipe.Time(ctx)
			_, _ = pipe.Exec(ctx) // each read's own error is checked below (a missing version is redis.Nil)
			mu.Lock()
			defer mu.Unlock()
			if v, err := ver.Int64(); err == nil {
				high = max(high, v)
			}
			if t, err := now.Result(); err == nil {
				clock = max(clock, t.UnixMilli())
			}
		}
	})
	if clock == 0 {
		clock = inv.limitVersion()
	}
	return max(clock, high+1)
}

// parseLimitTodo reads a pending limit change's value,
// "limit:version:route"; ok is false when it is not one.
func parseLimitTodo(val string) (limit, ver int64, route string, ok bool) {
	parts := strings.SplitN(val, ":", 3)
	if len(parts) != 3 {
		return 0, 0, "", false
	}
	limit, e1 := strconv.ParseInt(parts[0], 10, 64)
	ver, e2 := strconv.ParseInt(parts[1], 10, 64)
	return limit, ver, parts[2], e1 == nil && e2 == nil
}

// recordLimitTodo records a partial limit change on the nodes that took it.
func (inv *Inventory) recordLimitTodo(ctx context.Context, took []*node.Node, route, sku string, limit, ver int64) {
	val := strconv.FormatInt(limit, 10) + ":" + strconv.FormatInt(ver, 10) + ":" + route
	for _, n := range took {
		if _, err := inv.run(ctx, n, limitTodoScript, []string{keyLimitsTodo}, stockKey(route, sku), val); err != nil {
			inv.log.Warn("could not record a partial limit change; repeat the LoadStock", "node", n.Name(), "route", route, "sku", sku, "err", err)
		}
	}
}

// ConvergeLimits finishes limit changes recorded on node name that did not
// reach every node of their route (see the file comment). It returns how
// many changes are still incomplete (a node of the route is unavailable,
// or the route is configured but not applied yet). A record it cannot
// finish, one whose value is not "limit:version:route" with integer limit
// and version or whose route is neither applied nor configured, is logged
// (a warning naming the node, the field and the value) and dropped: no
// pass could finish it, and the limit reaches the route's nodes only by
// a new LoadStock.
func (inv *Inventory) ConvergeLimits(ctx context.Context, name string) (int, error) {
	n, err := inv.ownNode(name)
	if err != nil {
		return 0, err
	}
	ctx, v := inv.pin(ctx)
	if err := v.refuse(); err != nil {
		return 0, err
	}
	todo, err := n.Client().HGetAll(ctx, keyLimitsTodo).Result()
	if err != nil {
		return 0, fmt.Errorf("%w: node %s: %v", ErrUnavailable, name, err)
	}
	left := 0
	for key, val := range todo {
		limit, ver, route, ok := parseLimitTodo(val)
		set := v.routes[route]
		if ok && set == nil && inv.cfgSets[route] != nil {
			left++ // a route of this configuration, not applied yet
			continue
		}
		if !ok || set == nil {
			// a value that does not split into three parts included: it
			// was skipped on every pass with nothing said (found by a
			// review)
			inv.log.Warn("dropping a pending limit change that cannot be finished (unreadable, or of a route not configured); repeat its LoadStock",
				"node", name, "field", keyLimitsTodo+" "+key, "value", val)
			_, _ = inv.run(ctx, n, limitTodoScript, []string{keyLimitsTodo}, key, "", val)
			continue
		}
		done := true
		for _, m := range set.Nodes() {
			if !inv.usable(m) {
				done = false
				continue
			}
			prev, err := inv.run(ctx, m, limitSyncScript, []string{key}, limit, ver)
			var pv int64
			if err == nil {
				pv, err = asInt64(m, limitSyncScript, prev)
			}
			if err != nil {
				// Not known to have reached m (a malformed reply too:
				// outcome unknown): the change stays pending, retried.
				done = false
				continue
			}
			if pv < ver {
				inv.log.Info("per-user limit change reached a node that missed it", "node", m.Name(), "key", key, "limit", limit)
			}
		}
		if !done {
			left++
			continue
		}
		// Dropped only if it still holds the change read: a newer one
		// recorded since (a LoadStock that missed a node while this ran)
		// replaced it in the same field and must stay until it reaches
		// every node (limit_todo.lua).
		if _, err := inv.run(ctx, n, limitTodoScript, []string{keyLimitsTodo}, key, "", val); err != nil {
			left++
		}
	}
	return left, nil
}
