package node

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batchGate is the node's state gate and breaker for the batches of one
// auto-pipeliner, as a go-redis Limiter on the pipeliner's inner client
// instead of a hook. go-redis calls Allow before it writes a batch and
// ReportResult once with the batch's outcome (a transport error, never a
// reply-level error), so a DOWN node or an open breaker refuses the whole
// batch at once (every command of it gets the refusal) and a failed batch
// counts as one node failure, exactly as the hook's ProcessPipelineHook
// does on a hooked client.
//
// Why not the hook: go-redis's deferred auto-pipeliner arms a guard for
// hooks that read results on its dispatch goroutine whenever its client
// has any hook, and that guard reads the goroutine id from runtime.Stack
// once per batch (a visible share of a busy router's CPU, plus the hook chain
// itself). The gate needs no hook, so the inner client has none.
//
// Pairing: go-redis reports each admitted batch exactly once. The gate
// keeps its admissions in arrival order and hands each report the oldest
// open one; with one batch in flight per pipeliner (go-redis's default,
// MaxConcurrentBatches 1) that is always the batch's own admission.
type batchGate struct {
	n *Node

	mu   sync.Mutex  // guards open
	open []admission // admitted batches not yet reported, oldest first
}

// admission is one admitted batch: the breaker generation it was admitted
// under, the breaker's done func (nil on the fast path) and its start for
// Observe.
type admission struct {
	g     *guard
	done  func(error)
	start time.Time
}

// Allow admits a batch, or refuses it with the node's refusal error.
func (b *batchGate) Allow() error {
	g, done, err := b.n.admit()
	if err != nil {
		return err
	}
	a := admission{g: g, done: done}
	if b.n.opts.Observe != nil {
		a.start = time.Now()
	}
	b.mu.Lock()
	b.open = append(b.open, a)
	b.mu.Unlock()
	return nil
}

// ReportResult reports the outcome of the oldest admitted batch.
func (b *batchGate) ReportResult(err error) {
	b.mu.Lock()
	if len(b.open) == 0 {
		b.mu.Unlock()
		return // go-redis reports only what it admitted; nothing to pair
	}
	a := b.open[0]
	last := len(b.open) - 1
	copy(b.open, b.open[1:]) // keeps the backing array: no allocation per batch
	b.open[last] = admission{}
	b.open = b.open[:last]
	b.mu.Unlock()
	b.n.record(context.Background(), a.g, a.done, err, a.start)
}

// gatedOptions returns o for one pipeliner's inner client: a batch gate of
// its own (one pipeliner's batches, see the pairing rule) as its Limiter
// and a dialer that checks new connections and marks failed dials
// (afterDial, as the hook's DialHook does on hooked clients), so that
// client needs no hook. Call it once per client.
func (n *Node) gatedOptions(o redis.Options) redis.Options {
	o.Limiter = &batchGate{n: n}
	dial := redis.NewDialer(&o)
	o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		return n.afterDial(conn, err)
	}
	return o
}
