package rollback

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
)

// Settings configures [New]. The zero value works.
type Settings struct {
	// Interval is the time between passes over all nodes.
	// default: 1s
	Interval time.Duration
	// Batch is how many due parts are read from a node at a time; a pass
	// reads at most 20 batches per node.
	// default: 200
	Batch int
	// TrimEvery runs a redo-log trim every that many passes (0 = default).
	// default: 30
	TrimEvery int
	// TrimAge is the age past which settled redo-log entries are trimmed
	// without a consumer's acknowledgement.
	// default: 24h
	TrimAge time.Duration
	// Logger receives errors and what each pass did.
	// default: slog.Default()
	Logger *slog.Logger
}

// Stats counts what reconcilers did; every field is cumulative.
type Stats struct {
	Cancelled   int64 // expired parts cancelled
	Confirmed   int64 // parts confirmed after their order was
	Postponed   int64 // parts whose order was not decided yet
	Deferred    int64 // deferred settles completed
	Errors      int64 // failed steps (retried on a later pass)
	Passes      int64
	Trimmed     int64 // redo-log entries trimmed
	QueueLength int   // deferred parts waiting now
}

// Reconciler settles deferred and expired parts on every node of an
// inventory, every Interval and right away for a node that comes back.
// Several reconcilers (processes) may run over the same nodes: every part
// changes state at most once. Methods are safe for concurrent use.
type Reconciler struct {
	inv   *inventory.Inventory
	queue *Queue
	set   Settings
	log   *slog.Logger

	wake   chan string // node names to reconcile now
	stop   chan struct{}
	done   chan struct{}
	passMu sync.Mutex // serializes passes

	cancelled, confirmed, postponed, deferred, errs, passes, trimmed atomic.Int64
	startOnce, closeOnce                                             sync.Once
}

// New returns a reconciler; call Start to run it in the background, or
// RunOnce to drive it by hand. queue may be nil.
func New(inv *inventory.Inventory, queue *Queue, set Settings) *Reconciler {
	if set.Interval <= 0 {
		set.Interval = time.Second
	}
	if set.Batch <= 0 {
		set.Batch = 200
	}
	if set.TrimEvery <= 0 {
		set.TrimEvery = 30
	}
	if set.TrimAge <= 0 {
		set.TrimAge = 24 * time.Hour
	}
	if set.Logger == nil {
		set.Logger = slog.Default()
	}
	if queue == nil {
		queue = NewQueue()
	}
	return &Reconciler{
		inv: inv, queue: queue, set: set, log: set.Logger,
		wake: make(chan string, 64), stop: make(chan struct{}), done: make(chan struct{}),
	}
}

// Start runs passes in the background until Close. Idempotent.
func (r *Reconciler) Start() {
	r.startOnce.Do(func() { go r.loop() })
}

// NodeUp asks for an immediate pass over one node (wire it to the
// router's state changes). It never blocks.
func (r *Reconciler) NodeUp(name string) {
	select {
	case r.wake <- name:
	default:
	}
}

// Close stops the background loop and waits for a pass in progress.
// Idempotent; safe to call without Start.
func (r *Reconciler) Close() {
	r.closeOnce.Do(func() {
		close(r.stop)
		started := true
		r.startOnce.Do(func() { started = false })
		if started {
			<-r.done
		}
	})
}

// Stats returns the cumulative counters.
func (r *Reconciler) Stats() Stats {
	return Stats{
		Cancelled: r.cancelled.Load(), Confirmed: r.confirmed.Load(), Postponed: r.postponed.Load(),
		Deferred: r.deferred.Load(), Errors: r.errs.Load(), Passes: r.passes.Load(),
		Trimmed: r.trimmed.Load(), QueueLength: r.queue.Len(),
	}
}

func (r *Reconciler) loop() {
	defer close(r.done)
	t := time.NewTicker(r.set.Interval)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-r.stop
		cancel()
	}()
	for {
		select {
		case <-r.stop:
			return
		case name := <-r.wake:
			r.runNodes(ctx, []string{name})
		case <-t.C:
			r.RunOnce(ctx)
		}
	}
}

// RunOnce makes one pass over every usable node: deferred settles, due
// parts, and (every TrimEvery passes) a redo-log trim. It returns the
// number of steps that failed (they are retried on a later pass).
func (r *Reconciler) RunOnce(ctx context.Context) int {
	var names []string
	for _, n := range r.inv.Nodes() {
		names = append(names, n.Name())
	}
	return r.runNodes(ctx, names)
}

func (r *Reconciler) runNodes(ctx context.Context, names []string) int {
	r.passMu.Lock()
	defer r.passMu.Unlock()
	pass := r.passes.Add(1)
	failed := 0
	for _, n := range r.inv.Nodes() {
		if !slices.Contains(names, n.Name()) || !n.Usable() {
			continue
		}
		failed += r.node(ctx, n, pass%int64(r.set.TrimEvery) == 0)
	}
	r.errs.Add(int64(failed))
	return failed
}

// node reconciles one node and returns the number of failed steps.
func (r *Reconciler) node(ctx context.Context, n *node.Node, trim bool) int {
	failed := 0
	for _, s := range r.queue.take(n.Name()) {
		if _, err := r.inv.SettleNow(ctx, s); err != nil {
			r.queue.Enqueue(s)
			failed++
			continue
		}
		r.deferred.Add(int64(len(s.PartIDs)))
	}
	for range 20 {
		due, err := r.inv.DueParts(ctx, n, r.set.Batch)
		if err != nil {
			r.log.Warn("reconciler: reading due parts", "node", n.Name(), "err", err)
			return failed + 1
		}
		progress := 0
		for _, p := range due {
			res, err := r.inv.ResolveExpired(ctx, p)
			if err != nil {
				failed++
				if res == inventory.Postponed {
					progress++ // moved out of the way; the pass goes on
				}
				continue
			}
			switch res {
			case inventory.Cancelled:
				r.cancelled.Add(1)
			case inventory.Confirmed:
				r.confirmed.Add(1)
			case inventory.Postponed:
				r.postponed.Add(1)
			}
			progress++
		}
		if len(due) < r.set.Batch || progress == 0 {
			break
		}
	}
	if trim {
		k, err := r.inv.TrimRedoLog(ctx, n.Name(), r.set.TrimAge, 200)
		if err != nil {
			failed++
		}
		r.trimmed.Add(int64(k))
	}
	return failed
}
