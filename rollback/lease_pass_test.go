package rollback_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/rollback"
	"github.com/shardis/shardis/router"
)

// Two service instances over one node: each its own router, inventory and
// reconciler (so its own lease token). Instance A's inventory holds its
// first read of due parts ("pending-due") until the test lets it go: a
// pass held up mid-way, as by a slow node call, a GC pause or SIGSTOP,
// while it holds the node's lease.

// holdFirst is an inventory.Faults that holds the first call of script
// until release is closed (or the call's context ends) and lets every
// other call through.
type holdFirst struct {
	script  string
	reached chan struct{} // closed when the held call arrived
	release chan struct{}
	once    sync.Once
}

func newHoldFirst(script string) *holdFirst {
	return &holdFirst{script: script, reached: make(chan struct{}), release: make(chan struct{})}
}

func (h *holdFirst) Call(ctx context.Context, c inventory.ScriptCall, send func() (any, error)) (any, error) {
	held := false
	if c.Script == h.script {
		h.once.Do(func() { held = true })
	}
	if held {
		close(h.reached)
		select {
		case <-h.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return send()
}

func (h *holdFirst) Crash(context.Context, string) bool { return false }

// instanceOn is one more instance's inventory over server srv as node n1
// (route r), with faults (nil for none).
func instanceOn(t *testing.T, ctx context.Context, srv *redistest.Server, faults inventory.Faults) *inventory.Inventory {
	t.Helper()
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{"n1": {Addr: srv.Addr(), Weight: 1}}
	cfg.Servers = map[string]config.Server{"inventory": {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"r": {"n1"}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r, err := router.New(ctx, &cfg, router.Options{KeepData: cfg.KeepData(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	inv, err := inventory.New(r, inventory.Options{Logger: slog.New(slog.DiscardHandler), Faults: faults})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inv.Close)
	return inv
}

// waitFor polls cond every 20ms until it holds or limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", limit, what)
		}
	}
}

// TestLeaseHeldThroughALongPass: a background pass that lasts
// longer than Settings.Lease keeps the node's lease to its end, so
// another instance skips the node meanwhile (Settings.Lease: "It is
// released when the pass ends; it only runs out when an instance dies
// mid-pass"). The lease was taken once with PX Lease and never renewed: a
// pass held up past Lease lost it while running, and the other instance
// ran passes over the same node at the same time.
func TestLeaseHeldThroughALongPass(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := redistest.Start(t, redistest.Options{})
	hold := newHoldFirst("pending-due")
	invA := instanceOn(t, ctx, srv, hold)
	invB := instanceOn(t, ctx, srv, nil)
	set := rollback.Settings{Interval: 50 * time.Millisecond, Lease: time.Second, Logger: slog.New(slog.DiscardHandler)}
	a := rollback.New(invA, nil, set)
	a.Start()
	defer a.Close()
	defer close(hold.release) // before a.Close: let A's pass end
	select {
	case <-hold.reached:
	case <-time.After(20 * time.Second):
		t.Fatal("A's pass never read due parts")
	}
	b := rollback.New(invB, nil, set)
	b.Start()
	defer b.Close()
	// A's pass is held for three leases; B ticks every 50ms meanwhile.
	time.Sleep(3 * set.Lease)
	if st := b.Stats(); st.Passes != 0 || st.Skipped == 0 {
		t.Errorf("while A's pass (holding n1's lease) ran for 3 × Lease, B made %d pass(es) over n1 and skipped it %d time(s); want 0 passes",
			st.Passes, st.Skipped)
	}
}

// TestLostLeaseStopsThePass: a pass whose lease another instance took
// meanwhile (A's lease ran out while A was paused) does nothing more on
// the node. A pass never looked at its lease again after taking it: on
// resuming it settled the node's due parts while the lease was another
// instance's, the two instances working the node at once.
func TestLostLeaseStopsThePass(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	hold := newHoldFirst("pending-due")
	invA := instanceOn(t, ctx, srv, hold)
	inv := instanceOn(t, ctx, srv, nil) // the test's own view of the node
	if _, err := inv.LoadStock(ctx, "r", "tee", 10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Reserve(ctx, "o-1", []inventory.Item{{Route: "r", SKU: "tee", Quantity: 3}}, "", time.Second); err != nil {
		t.Fatal(err)
	}
	n1 := inv.Nodes()[0]
	waitFor(t, 10*time.Second, "o-1's part never came due", func() bool {
		due, err := inv.DueParts(ctx, n1, 10)
		return err == nil && len(due) == 1
	})

	set := rollback.Settings{Interval: 50 * time.Millisecond, Lease: 500 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	a := rollback.New(invA, nil, set)
	a.Start()
	defer a.Close()
	select {
	case <-hold.reached:
	case <-time.After(20 * time.Second):
		t.Fatal("A's pass never read due parts")
	}
	// A is paused past its lease; another instance holds it now.
	if err := c.Set(ctx, rollback.LeaseKey, "another-instance", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * set.Lease)
	close(hold.release)
	// A's pass has ended once a later tick of A finds the lease held.
	waitFor(t, 20*time.Second, "A never skipped n1 after its pass", func() bool { return a.Stats().Skipped > 0 })
	lvl, err := inv.GetStock(ctx, "r", "tee")
	if err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Cancelled != 0 || lvl.Reserved != 3 {
		t.Errorf("A went on after another instance took n1's lease: it cancelled %d part(s) (reserved now %d, want 3 left to the holder)",
			st.Cancelled, lvl.Reserved)
	}
}
