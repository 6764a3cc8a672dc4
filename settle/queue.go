// Package settle finishes in the background what requests could not: it
// retries settle work deferred because a node was unreachable ([Queue])
// and, as the safety net under everything, reconciles each node's pending
// parts whose deadline has passed by the decision recorded for their order
// ([Reconciler]). [Open] wires it with a router and an inventory the way
// `shardis serve` runs them. (It was called rollback; it never rolls back a
// partial order: Reserve cancels what a failed attempt took before it
// returns.)
//
// The reconciler works nodes concurrently and, across instances, one
// instance per node at a time (the node's lease, [LeaseKey]); a part it
// cannot settle is set aside on its node (see inventory.StuckPart) instead
// of holding up the others.
//
// The queue lives in memory and may be lost with the process; nothing
// depends on it for correctness, only for speed: every pending part carries
// a deadline, and the reconciler of any instance settles it after that.
package settle

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
