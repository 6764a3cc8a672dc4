package tests

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/rollback"
)

// TestRollbackRacesWithLiveTraffic runs two processes' background
// reconcilers (each with its own deferred-settle queue, a short lease and
// a fast interval) while orders with short TTLs are reserved, retried,
// confirmed and cancelled from both processes around their deadlines, and
// nodes are paused (SIGSTOP) now and then, so settles are deferred,
// expiry races the decisions and the leases run out mid-pass. Afterwards
// every part follows its order's one decision, an acknowledged Confirm or
// Cancel is the order's final status, and stock is conserved, with the
// confirmed units exactly those of the confirmed orders.
func TestRollbackRacesWithLiveTraffic(t *testing.T) {
	t.Parallel()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	c := newInvCluster(t, invOpts{lease: 700 * time.Millisecond,
		routes: map[string][]string{"r": {"n1", "n2", "n3"}, "solo": {"n3"}}})
	const loaded = 900
	c.load("r", "s", loaded, 0)
	c.load("solo", "s", loaded, 0)
	q2 := rollback.NewQueue()
	_, inv2 := c.newInventory(t, q2)
	invs := []*inventory.Inventory{c.inv, inv2}
	set := rollback.Settings{Interval: 50 * time.Millisecond, Lease: 150 * time.Millisecond, Batch: 5, Workers: 4,
		StuckRetry: 50 * time.Millisecond, StuckRetryMax: 200 * time.Millisecond}
	recs := []*rollback.Reconciler{c.reconciler(nil, nil, set), c.reconciler(inv2, q2, set)}
	for _, r := range recs {
		r.Start()
	}

	ctx := invCtx(t, 90*time.Second)
	var mu sync.Mutex
	acked := map[string]string{} // order → "confirmed" / "cancelled" acknowledged
	qty := map[string]int64{}    // order → units of route r + solo, by its items
	var orders []string
	var wg sync.WaitGroup
	stop := make(chan struct{})
	// the pauser: a node frozen for 200-1200 ms every so often
	pwg := sync.WaitGroup{}
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		rng := rand.New(rand.NewSource(seed + 1))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(200+rng.Intn(600)) * time.Millisecond):
			}
			name := c.names[rng.Intn(len(c.names))]
			c.srv[name].Pause()
			time.Sleep(time.Duration(200+rng.Intn(1000)) * time.Millisecond)
			c.srv[name].Resume()
		}
	}()
	for i := 0; i < 60; i++ {
		id := fmt.Sprintf("rr-%d", i)
		rng := rand.New(rand.NewSource(seed + int64(100+i)))
		items := []inventory.Item{invItem("r", "s", int64(1+rng.Intn(3)))}
		if rng.Intn(2) == 0 {
			items = append(items, invItem("solo", "s", 1))
		}
		var sum int64
		for _, it := range items {
			sum += it.Quantity
		}
		orders = append(orders, id)
		qty[id] = sum
		ttl := time.Duration(1000+rng.Intn(1000)) * time.Millisecond
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rng.Intn(3000)) * time.Millisecond)
			reserve := func(inv *inventory.Inventory) error {
				rctx, cancel := context.WithTimeout(ctx, time.Duration(200+rng.Intn(800))*time.Millisecond)
				defer cancel()
				_, err := inv.Reserve(rctx, id, items, "", ttl)
				return err
			}
			err := reserve(invs[rng.Intn(2)])
			if err != nil && rng.Intn(2) == 0 {
				time.Sleep(time.Duration(rng.Intn(1500)) * time.Millisecond)
				err = reserve(invs[rng.Intn(2)])
			}
			_ = err
			var dwg sync.WaitGroup
			for k := 0; k < rng.Intn(3); k++ {
				confirm := rng.Intn(3) != 0
				wait := time.Duration(rng.Intn(int(ttl/time.Millisecond)+800)) * time.Millisecond
				inv := invs[rng.Intn(2)]
				dwg.Add(1)
				go func() {
					defer dwg.Done()
					time.Sleep(wait)
					for try := 0; try < 3; try++ {
						dctx, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
						var err error
						if confirm {
							_, err = inv.Confirm(dctx, id)
						} else {
							_, err = inv.Cancel(dctx, id)
						}
						cancel()
						if err == nil {
							mu.Lock()
							if confirm {
								acked[id+"/c"] = "confirmed"
							} else {
								acked[id+"/x"] = "cancelled"
							}
							mu.Unlock()
							return
						}
						if !errors.Is(err, inventory.ErrUnavailable) && !errors.Is(err, inventory.ErrInProgress) {
							return
						}
						time.Sleep(100 * time.Millisecond)
					}
				}()
			}
			dwg.Wait()
		}()
	}
	wg.Wait()
	close(stop)
	pwg.Wait()
	for _, name := range c.names {
		c.waitUsable(name, 10*time.Second)
	}
	invWaitNoPending(t, c.clients, orders, 20*time.Second)
	for _, r := range recs {
		r.Close()
	}
	for i, r := range recs {
		t.Logf("reconciler %d: %+v", i+1, r.Stats())
	}
	status := invCheckDecisions(t, c, orders)
	var confirmed int64
	for _, id := range orders {
		mu.Lock()
		c1, x1 := acked[id+"/c"], acked[id+"/x"]
		mu.Unlock()
		if c1 != "" && status[id] != "confirmed" {
			t.Errorf("order %s: Confirm acknowledged, but the order ended %s", id, status[id])
		}
		if x1 != "" && status[id] != "cancelled" {
			t.Errorf("order %s: Cancel acknowledged, but the order ended %s", id, status[id])
		}
		if status[id] == "confirmed" {
			confirmed += qty[id]
		}
	}
	lr := checkInvariant(t, c.inv, "r", "s", loaded)
	ls := checkInvariant(t, c.inv, "solo", "s", loaded)
	if lr.Reserved+ls.Reserved != 0 || lr.Confirmed+ls.Confirmed != confirmed {
		t.Errorf("after reconciliation: reserved %d+%d, confirmed %d+%d; want 0 reserved and %d confirmed (the confirmed orders')",
			lr.Reserved, ls.Reserved, lr.Confirmed, ls.Confirmed, confirmed)
	}
	t.Logf("statuses: %v", status)
}
