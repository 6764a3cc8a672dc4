package rollback

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
)

// Settings configures [New]. The zero value works, and so does any other:
// New puts a zero or negative field at its default and brings a field out
// of range to the nearest value in range, as each field says.
type Settings struct {
	// Interval is the time between passes over all nodes.
	// default: 1s
	Interval time.Duration
	// Batch is how many due parts are read from a node at a time, and
	// how many stuck parts whose backoff ran out a pass retries per node;
	// a pass reads at most 20 batches per node. Above 10000 (the most
	// inventory.Inventory.RetryDueStuck takes) it is 10000.
	// default: 200
	Batch int
	// Nodes is how many nodes are worked at once. A node whose previous
	// pass is still running is skipped by the next tick, so one slow node
	// never holds up the others.
	// default: 4
	Nodes int
	// Workers is how many due parts of one node are settled at once (each
	// needs its order's home node, which may be slow).
	// default: 16
	Workers int
	// Lease is how long a background pass holds a node's lease
	// (inv:reconcile:lease on the node) without renewing it: while one
	// instance holds it, other instances skip the node, so several
	// instances share the work instead of repeating it. The pass renews
	// it every Lease/3 and releases it when it ends; it only runs out
	// when an instance dies, stops (a GC pause, SIGSTOP) or cannot reach
	// the node for longer than Lease mid-pass, or early when the node's
	// clock steps forward (Redis expires keys by its wall clock). A pass
	// takes each step that changes the node only with the lease
	// confirmed less than Lease ago (by this process's monotonic clock),
	// and stops when it cannot confirm it (another instance holds it, or
	// the node does not answer). The node keeps it in whole milliseconds:
	// under 1ms it is 1ms.
	// default: 3 × Interval, at least 1s
	Lease time.Duration
	// TrimEvery runs a redo-log trim every that many passes of a node (0 =
	// default). A trim removes from the head of each queue the settled
	// entries a consumer acknowledged (and, with TrimAge, old ones), 200
	// per queue per call, calling again while a queue had 200 removed
	// (inventory.RedoTrim.More), at most TrimCalls calls: up to 10000
	// entries per queue per trim at the default. A trim that stopped at that bound with more to
	// remove is followed by another on the node's next pass, not
	// TrimEvery passes later: up to 10000 entries per queue per pass
	// while a backlog lasts (all of one SKU's entries go to one queue).
	// default: 30
	TrimEvery int
	// TrimCalls bounds the calls of one trim (each one script on the node
	// removing up to 200 entries per queue).
	// default: 50
	TrimCalls int
	// TrimAge, when > 0, also trims settled redo-log entries older than it
	// that no consumer acknowledged. 0 never trims an unacknowledged entry.
	// Whatever its age, the entry of a part whose record is gone while the
	// node lists the part pending or set aside is kept (it is pending, its
	// record lost; a retry after a repair puts it back under its entry's
	// place) while it is listed (inventory.TrimRedoLog).
	// The node keeps ages in whole milliseconds: above 0 and under 1ms it
	// is 1ms.
	// default: 0 (never)
	TrimAge time.Duration
	// StuckRetry is how long after a part was set aside as stuck
	// (inventory.StuckPart) the reconciler retries it by itself; each time
	// it is set aside again the wait doubles, up to StuckRetryMax. The
	// backoff is kept on the part's node, so any instance retries it.
	// Under 1ms it is 1ms (the node keeps whole milliseconds).
	// default: 5s
	StuckRetry time.Duration
	// StuckRetryMax caps the wait between automatic retries of a stuck
	// part (raised to StuckRetry when below it). It is capped at a quarter
	// of the inventory's retention (inventory.retention,
	// inventory.Inventory.Retention), and StuckRetry with it: each retry
	// relies on the part's order record, which keeps it the retention from
	// then, so a part retried within it never outlives the record that
	// says how it settles (a part that does anyway is set aside for an
	// operator: inventory.StuckPart).
	// default: 5m (at most retention/4)
	StuckRetryMax time.Duration
	// Logger receives errors and what each pass did.
	// default: slog.Default()
	Logger *slog.Logger
}

// The backoff of stuck parts unless Settings say otherwise: the first
// automatic retry of a part set aside comes DefaultStuckRetry after it,
// each further one twice as late, at most DefaultStuckRetryMax (the
// inventory's defaults, which the apply's settle of leaving nodes uses too).
const (
	DefaultStuckRetry    = inventory.DefaultStuckRetry
	DefaultStuckRetryMax = inventory.DefaultStuckRetryMax
)

// maxBatch is the largest Settings.Batch used: the most parts
// inventory.Inventory.RetryDueStuck takes per call.
const maxBatch = 10000

// Stats counts what reconcilers did; every field is cumulative.
type Stats struct {
	Cancelled int64 // expired parts cancelled
	Confirmed int64 // parts confirmed after their order was
	Postponed int64 // parts whose order was not decided yet
	// Deferred counts the parts of deferred settles (the queue) whose
	// settle call succeeded, each part whatever its result (settled now,
	// found settled already, missing, or in another state), and the
	// parts of an unsettleable settle that settled when tried alone.
	Deferred int64
	// Errors counts failed steps of node passes, one per step whatever
	// the parts it held: a deferred settle that failed (back in the
	// queue) or could not be done until data is repaired (its parts
	// dropped from the queue, left to the expiry pass); a read of due
	// parts, a settle of a due part (a part postponed because its
	// order's decision was out of reach included), a set-aside, a retry
	// of stuck parts, a limit convergence or a trim that failed (retried
	// on a later pass); a lease that could not be taken or was lost
	// mid-pass.
	Errors      int64
	SetAside    int64 // parts set aside as stuck (see inventory.StuckPart), each counted once until an explicit retry
	Retried     int64 // stuck parts whose backoff ran out, put back to pending
	Passes      int64 // node passes run (background and RunOnce), one per node per pass; skipped ones not counted
	Skipped     int64 // node passes skipped: another instance held the lease (a lease lost mid-pass is an Error)
	Trimmed     int64 // redo-log entries trimmed
	QueueLength int   // deferred parts waiting now
}

// Reconciler settles deferred and expired parts on every node of the
// topology an inventory serves (the applied one), every Interval and right away for a node that comes back.
// Nodes are worked concurrently (at most Settings.Nodes at once), each by
// at most one pass of this process at a time and, for background passes,
// by one instance at a time (the node's lease, Settings.Lease; not a
// fence: an instance paused right between its check of the lease and a
// write may still make that write beside the next holder). A part that cannot be
// settled is set aside on its node (inventory.Inventory.SetAside) and
// logged once, so it never blocks other parts; it is retried by itself
// with backoff (Settings.StuckRetry) at the start of the node's passes.
// Several reconcilers (processes) may run over the same nodes: every part
// changes state at most once. A node pass also audits the node's stock
// counters once per server process (audit.go). Methods are safe for
// concurrent use.
type Reconciler struct {
	inv   *inventory.Inventory
	queue *Queue
	set   Settings
	log   *slog.Logger
	id    string // this reconciler's lease token

	wake    chan string // node names to reconcile now
	stop    chan struct{}
	done    chan struct{}
	sem     chan struct{}            // bounds nodes worked at once
	nodeMu  map[string]*sync.Mutex   // one pass per node at a time; fixed after New
	nodeN   map[string]*atomic.Int64 // passes per node (trim cadence); fixed after New
	behind  map[string]*atomic.Bool  // the node's last trim stopped at its call bound with more to remove; fixed after New
	running sync.WaitGroup           // background node passes

	cancelled, confirmed, postponed, deferred, errs, passes, trimmed atomic.Int64
	setAside, skipped, retried                                       atomic.Int64
	startOnce, closeOnce                                             sync.Once
	audit                                                            audits // the stock audits (audit.go)
}

// New returns a reconciler; call Start to run it in the background, or
// RunOnce to drive it by hand. queue may be nil.
func New(inv *inventory.Inventory, queue *Queue, set Settings) *Reconciler {
	set = set.filled().within(inv.Retention())
	if queue == nil {
		queue = NewQueue()
	}
	r := &Reconciler{
		inv: inv, queue: queue, set: set, log: set.Logger, id: leaseToken(),
		wake: make(chan string, 64), stop: make(chan struct{}), done: make(chan struct{}),
		sem: make(chan struct{}, set.Nodes), nodeMu: map[string]*sync.Mutex{}, nodeN: map[string]*atomic.Int64{},
		behind: map[string]*atomic.Bool{},
	}
	for _, n := range inv.Nodes() {
		r.nodeMu[n.Name()] = &sync.Mutex{}
		r.nodeN[n.Name()] = &atomic.Int64{}
		r.behind[n.Name()] = &atomic.Bool{}
	}
	return r
}

// filled returns s with every zero or negative field at its default and
// every field out of range brought to the nearest value in range, as
// documented on each field: what it returns is accepted by every
// inventory call and node command a pass makes with it.
func (set Settings) filled() Settings {
	if set.Interval <= 0 {
		set.Interval = time.Second
	}
	if set.Batch <= 0 {
		set.Batch = 200
	}
	set.Batch = min(set.Batch, maxBatch)
	if set.Nodes <= 0 {
		set.Nodes = 4
	}
	if set.Workers <= 0 {
		set.Workers = 16
	}
	if set.Lease <= 0 {
		// 3 × Interval, or the longest Duration where that would overflow
		set.Lease = time.Duration(math.MaxInt64)
		if set.Interval <= set.Lease/3 {
			set.Lease = 3 * set.Interval
		}
		set.Lease = max(set.Lease, time.Second)
	}
	set.Lease = max(set.Lease, time.Millisecond) // sent as PX whole ms: PX 0 is refused
	if set.TrimEvery <= 0 {
		set.TrimEvery = 30
	}
	if set.TrimCalls <= 0 {
		set.TrimCalls = 50
	}
	if set.TrimAge < 0 {
		set.TrimAge = 0
	}
	if set.TrimAge > 0 {
		set.TrimAge = max(set.TrimAge, time.Millisecond) // sent as whole ms: 0 would mean never
	}
	if set.Logger == nil {
		set.Logger = slog.Default()
	}
	if set.StuckRetry <= 0 {
		set.StuckRetry = DefaultStuckRetry
	}
	if set.StuckRetryMax <= 0 {
		set.StuckRetryMax = DefaultStuckRetryMax
	}
	set.StuckRetry = max(set.StuckRetry, time.Millisecond)
	set.StuckRetryMax = max(set.StuckRetryMax, set.StuckRetry)
	return set
}

// within returns s (filled) with its stuck-part backoff capped at a
// quarter of retention, the inventory's (Settings.StuckRetryMax), at
// least 1ms.
func (set Settings) within(retention time.Duration) Settings {
	set.StuckRetry, set.StuckRetryMax = inventory.StuckBackoffWithin(set.StuckRetry, set.StuckRetryMax, retention)
	return set
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

// Close stops the background loop and waits for its passes in progress
// (a RunOnce runs in its caller's goroutine: the caller waits for it).
// Idempotent; safe to call without Start.
func (r *Reconciler) Close() {
	r.closeOnce.Do(func() {
		close(r.stop)
		started := true
		r.startOnce.Do(func() { started = false })
		if started {
			<-r.done
		}
		r.running.Wait()
	})
}

// Stats returns the cumulative counters.
func (r *Reconciler) Stats() Stats {
	return Stats{
		Cancelled: r.cancelled.Load(), Confirmed: r.confirmed.Load(), Postponed: r.postponed.Load(),
		Deferred: r.deferred.Load(), Errors: r.errs.Load(), SetAside: r.setAside.Load(), Retried: r.retried.Load(),
		Passes: r.passes.Load(), Skipped: r.skipped.Load(), Trimmed: r.trimmed.Load(),
		QueueLength: r.queue.Len(),
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
			r.dispatch(ctx, []string{name})
		case <-t.C:
			r.dispatch(ctx, nil)
		}
	}
}

// dispatch starts a background pass, under the node's lease, on every
// usable member of the topology the inventory serves (all when names is
// nil, else the named ones) whose previous pass has ended. It does not
// wait.
func (r *Reconciler) dispatch(ctx context.Context, names []string) {
	for _, n := range r.members(ctx) {
		mu := r.nodeMu[n.Name()]
		if mu == nil || (names != nil && !slices.Contains(names, n.Name())) || !n.Usable() || !mu.TryLock() {
			continue
		}
		r.running.Add(1)
		go func(n *node.Node) {
			defer r.running.Done()
			defer mu.Unlock()
			select {
			case r.sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-r.sem }()
			r.errs.Add(int64(r.leased(ctx, n)))
		}(n)
	}
}

// members returns the nodes of the topology the inventory serves now (the
// applied one, whatever the configuration says: a node only the
// configuration has holds nothing yet).
func (r *Reconciler) members(ctx context.Context) []*node.Node {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return r.inv.Members(ctx)
}

// RunOnce makes one pass over every usable node, concurrently, and waits
// for it: deferred settles, due parts, and (every TrimEvery passes of a
// node) a redo-log trim. A node's background pass in progress is waited
// for first. RunOnce ignores other instances' leases (it is for driving a
// reconciler by hand). It returns the number of steps that failed, as
// Stats.Errors counts them.
func (r *Reconciler) RunOnce(ctx context.Context) int {
	var failed atomic.Int64
	var wg sync.WaitGroup
	for _, n := range r.members(ctx) {
		mu := r.nodeMu[n.Name()]
		if mu == nil || !n.Usable() {
			continue
		}
		wg.Add(1)
		go func(n *node.Node) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			r.sem <- struct{}{}
			defer func() { <-r.sem }()
			failed.Add(int64(r.node(ctx, n, nil)))
		}(n)
	}
	wg.Wait()
	r.errs.Add(failed.Load())
	return int(failed.Load())
}
