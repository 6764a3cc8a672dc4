// Package rollback gives stock back: every path by which units a request
// took return to their node in the background, named after the design
// card's rollback/ package. It retries the settles of a failed, partial or
// decided order that could not reach a node at once ([Queue]: deferred
// settles); and, as the safety net under everything, it settles each
// node's pending parts whose deadline has passed by the decision recorded
// for their order (the [Reconciler]: expiry), setting aside the parts that
// cannot be settled and retrying them with backoff (stuck parts). Its
// package Example wires it with a router and an inventory the way
// `shardis serve` runs them (internal/stack), [Waker] included. (Reserve itself releases what a failed attempt took before it
// returns; what it could not reach comes here as deferred settles.)
//
// The reconciler works nodes concurrently and, across instances, one
// instance per node at a time (the node's lease, [LeaseKey]); a part it
// cannot settle is set aside on its node (see inventory.StuckPart) instead
// of holding up the others.
//
// The queue lives in memory and may be lost with the process; nothing
// depends on it for correctness, only for speed: every pending part carries
// a deadline, and the reconciler of any instance settles it after that.
//
// What is this package's and what stays in package inventory. The policy
// is here: when and how often passes run, in what order, what is done with
// a part that fails, and the backoff of stuck parts (Settings.StuckRetry,
// StuckRetryMax and their defaults; the inventory only keeps the backoff
// on the node). The steps stay methods of the inventory (SettleNow,
// DueParts, ResolveExpired, SetAside, RetryDueStuck, RetryStuck,
// StuckParts), for these reasons:
//   - each step that changes a node is a Lua script run by the inventory's
//     unexported runner (the prelude's identity and topology-epoch fence,
//     group commit, fault injection, write acknowledgement: inventory/lua.go)
//     on unexported keys (inv:stuck, inv:stuck:why, inv:stuck:retry);
//     moving one needs that runner exported, or the scripts in a package
//     of their own (issue 25's "scripts as files");
//   - expiry (ResolveExpired) decides by the order state machine's
//     compare-and-set (the unexported order script) and decides staged
//     orders first (resolveStaged, the one-round protocol's probe);
//   - the inventory calls into these paths itself: Reserve, Confirm and
//     Cancel release and defer settles (settleParts, abortParts),
//     LoadStock retries the stuck parts of the SKU it loads
//     (RetryStuckSKU), and ResolveExpired classifies its own errors with
//     inventory.Unsettleable; this package imports inventory, so moving
//     any of them here would be an import cycle.
package rollback

import (
	"sync"

	"github.com/shardis/shardis/inventory"
)

// Queue holds deferred settle work until its node is reachable. It
// implements [inventory.Deferrer]. Safe for concurrent use; the zero value
// is not usable, call [NewQueue].
type Queue struct {
	mu     sync.Mutex
	byNode map[string][]inventory.Settle // guarded by mu
	total  int                           // guarded by mu
}

// NewQueue returns an empty queue.
func NewQueue() *Queue { return &Queue{byNode: map[string][]inventory.Settle{}} }

// Enqueue adds work. It never blocks on I/O.
func (q *Queue) Enqueue(s inventory.Settle) {
	q.mu.Lock()
	q.byNode[s.Node] = append(q.byNode[s.Node], s)
	q.total += len(s.PartIDs)
	q.mu.Unlock()
}

// Len returns the number of parts waiting.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.total
}

// take removes and returns the work of one node.
func (q *Queue) take(node string) []inventory.Settle {
	q.mu.Lock()
	defer q.mu.Unlock()
	work := q.byNode[node]
	delete(q.byNode, node)
	for _, s := range work {
		q.total -= len(s.PartIDs)
	}
	return work
}
