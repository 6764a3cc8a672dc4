package inventory

import (
	"context"
	"sync"
)

// batchQueue is the per-node queue behind group commit (group.go) and
// refuseShort's reads (peekbatch.go): at most a few batches of one node
// under way, calls that arrive meanwhile wait, and whoever sent a batch
// sends what waits as the next batches once it returned, at most size
// calls each, every call of a batch of one line (key K: a grouped script)
// and under the same epoch token.
//
// The slots are the node's, not a line's: the lines (the node's grouped
// scripts) share its maxInFlight batches, and a batch that returns takes
// the next line with calls waiting, in turn. So calls of several scripts
// on one node gather in fewer, larger batches (each batch is one script
// call, whose fixed cost its calls share), and one busy line cannot keep
// another waiting for more than a batch of each of the others.
type batchQueue[K, T comparable] struct {
	mu       sync.Mutex         // guards the fields below
	lines    []*batchLine[K, T] // one per key, in first-use order
	waiting  int                // calls queued, over all lines
	inflight int                // batches under way, of any line
	next     int                // the line drain looks at first
}

// batchLine is the calls of one key waiting for a batch.
type batchLine[K, T comparable] struct {
	key    K
	queue  []T      // waiting, oldest first
	tokens []string // the epoch token of each waiting call
}

// line returns key's line, made on first use. Called with mu held; the
// lines are few (a node's grouped scripts), so a scan finds one.
func (q *batchQueue[K, T]) line(key K) *batchLine[K, T] {
	for _, l := range q.lines {
		if l.key == key {
			return l
		}
	}
	l := &batchLine[K, T]{key: key}
	q.lines = append(q.lines, l)
	return l
}

// enter takes a batch's slot for item when fewer than maxInFlight batches
// are under way and no call waits (of any line), and reports true: the
// caller sends item alone, then calls drain. Otherwise it queues item on
// key's line under token for a later batch and reports false.
func (q *batchQueue[K, T]) enter(key K, item T, token string, maxInFlight int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.inflight < maxInFlight && q.waiting == 0 {
		q.inflight++
		return true
	}
	l := q.line(key)
	l.queue = append(l.queue, item)
	l.tokens = append(l.tokens, token)
	q.waiting++
	return false
}

// leave takes queued item off key's line (its caller gave up: nothing was
// sent) and reports whether it was still there; false means a batch
// carries it.
func (q *batchQueue[K, T]) leave(key K, item T) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, l := range q.lines {
		if l.key != key {
			continue
		}
		for i, w := range l.queue {
			if w == item {
				l.queue = append(l.queue[:i], l.queue[i+1:]...)
				l.tokens = append(l.tokens[:i], l.tokens[i+1:]...)
				q.waiting--
				return true
			}
		}
	}
	return false
}

// drain is called by the sender of a batch once it returned: it sends the
// queued calls as the next batches (send, at most size calls of one line
// each, the lines in turn), or, with nothing queued, gives the batch's
// slot back. A caller that sent its own call passes spawn, to which drain
// hands the queue (a goroutine of the inventory's workers: workers.go) so
// that the caller can return its own reply at once; a sender of its own
// goroutine passes nil and drains on it.
func (q *batchQueue[K, T]) drain(ctx context.Context, size int, spawn func(func()), send func(ctx context.Context, key K, token string, batch []T)) {
	for {
		q.mu.Lock()
		if q.waiting == 0 {
			q.inflight--
			q.mu.Unlock()
			return
		}
		if spawn != nil {
			q.mu.Unlock()
			ctx := context.WithoutCancel(ctx)
			spawn(func() { q.drain(ctx, size, nil, send) })
			return
		}
		l := q.take()
		token := l.tokens[0]
		k := 1
		for k < len(l.queue) && k < size && l.tokens[k] == token {
			k++
		}
		batch := append([]T(nil), l.queue[:k]...)
		l.queue = append(l.queue[:0], l.queue[k:]...)
		l.tokens = append(l.tokens[:0], l.tokens[k:]...)
		q.waiting -= k
		q.mu.Unlock()
		send(ctx, l.key, token, batch)
	}
}

// busy reports whether batches are under way or calls wait.
func (q *batchQueue[K, T]) busy() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.inflight > 0 || q.waiting > 0
}

// take returns the next line with calls waiting, from q.next on, and
// moves q.next past it. Called with mu held and q.waiting > 0.
func (q *batchQueue[K, T]) take() *batchLine[K, T] {
	for i := range q.lines {
		j := (q.next + i) % len(q.lines)
		if l := q.lines[j]; len(l.queue) > 0 {
			q.next = (j + 1) % len(q.lines)
			return l
		}
	}
	panic("inventory: batchQueue: calls counted as waiting, none queued")
}
