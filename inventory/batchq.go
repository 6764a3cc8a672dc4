package inventory

import (
	"context"
	"sync"
)

// batchQueue is the per-node queue behind group commit (group.go) and
// refuseShort's reads (peekbatch.go): at most a few batches of one node
// under way, calls that arrive meanwhile wait, and whoever sent a batch
// sends what waits as the next batches once it returned, at most size
// calls each, every call of a batch under the same epoch token.
type batchQueue[T comparable] struct {
	mu       sync.Mutex // guards the fields below
	queue    []T        // waiting, oldest first
	tokens   []string   // the epoch token of each waiting call
	inflight int        // batches under way
}

// enter takes a batch's slot for item when fewer than maxInFlight batches
// are under way and none waits, and reports true: the caller sends item
// alone, then calls drain. Otherwise it queues item under token for a
// later batch and reports false.
func (q *batchQueue[T]) enter(item T, token string, maxInFlight int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.inflight < maxInFlight && len(q.queue) == 0 {
		q.inflight++
		return true
	}
	q.queue = append(q.queue, item)
	q.tokens = append(q.tokens, token)
	return false
}

// leave takes queued item off the queue (its caller gave up: nothing was
// sent) and reports whether it was still there; false means a batch
// carries it.
func (q *batchQueue[T]) leave(item T) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, w := range q.queue {
		if w == item {
			q.queue = append(q.queue[:i], q.queue[i+1:]...)
			q.tokens = append(q.tokens[:i], q.tokens[i+1:]...)
			return true
		}
	}
	return false
}

// drain is called by the sender of a batch once it returned: it sends the
// queued calls as the next batches (send, at most size calls each), or,
// with nothing queued, gives the batch's slot back. A caller that sent its
// own call (background false) hands the queue to a new goroutine so it
// can return its own reply at once.
func (q *batchQueue[T]) drain(ctx context.Context, size int, background bool, send func(ctx context.Context, token string, batch []T)) {
	for {
		q.mu.Lock()
		if len(q.queue) == 0 {
			q.inflight--
			q.mu.Unlock()
			return
		}
		if !background {
			q.mu.Unlock()
			go q.drain(context.WithoutCancel(ctx), size, true, send)
			return
		}
		token := q.tokens[0]
		k := 1
		for k < len(q.queue) && k < size && q.tokens[k] == token {
			k++
		}
		batch := append([]T(nil), q.queue[:k]...)
		q.queue = append(q.queue[:0], q.queue[k:]...)
		q.tokens = append(q.tokens[:0], q.tokens[k:]...)
		q.mu.Unlock()
		send(ctx, token, batch)
	}
}
