package tests

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/rollback"
	"github.com/shardis/shardis/router"
)

// TestInventoryCloseLeaksNoGoroutines runs an inventory through the work
// that starts goroutines of its own (one-round orders over three nodes:
// their stages and takes sent side by side, group commit's drains, the
// commits waiting in the carry buffers with their timers; confirms,
// cancels, and a reconciler's passes), closes the reconciler, the
// inventory and the router, and checks the goroutine count is back where
// it was before. One order is reserved just before Close, so Close meets
// a commit still waiting for a carrier. Not parallel: it counts the whole
// process's goroutines.
func TestInventoryCloseLeaksNoGoroutines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := redistest.StartN(t, 3, redistest.Options{})
	cfg := newConfig(t,
		map[string]string{"n1": srv[0].Addr(), "n2": srv[1].Addr(), "n3": srv[2].Addr()},
		map[string]config.Server{invServer: server(config.OnNodeDownFail,
			map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n3"}})},
		&quickHealth)
	cfg.Inventory.ReconcileInterval = 50 * time.Millisecond

	before := stableGoroutines()
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: invDiscard})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.New(r, inventory.Options{Logger: invDiscard})
	if err != nil {
		t.Fatal(err)
	}
	rec := rollback.New(inv, rollback.NewQueue(), rollback.Settings{Interval: 50 * time.Millisecond, Logger: invDiscard})
	rec.Start()
	items := []inventory.Item{{Route: "a", SKU: "x", Quantity: 1}, {Route: "b", SKU: "x", Quantity: 1}, {Route: "c", SKU: "x", Quantity: 1}}
	for _, it := range items {
		if _, err := inv.LoadStock(ctx, it.Route, it.SKU, 10000, 0); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				id := fmt.Sprintf("close-%d-%d", g, i)
				_, err := inv.Reserve(ctx, id, items, "", time.Minute)
				switch {
				case err != nil:
				case i%3 == 0:
					_, err = inv.Confirm(ctx, id)
				case i%3 == 1:
					_, err = inv.Cancel(ctx, id)
				}
				if err != nil {
					errs <- fmt.Errorf("order %s: %w", id, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // a few reconciler passes
	if _, err := inv.Reserve(ctx, "close-last", items, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	if st := inv.Stats(); st.StagedReservations == 0 {
		t.Fatalf("no one-round order ran: %+v", st)
	}
	during := runtime.NumGoroutine()

	rec.Close()
	inv.Close()
	if err := r.Close(); err != nil {
		t.Fatalf("router Close: %v", err)
	}
	goroutinesBackTo(t, before, during, 3*time.Second)
}
