package tests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/rollback"
)

// TestInvFence walks the TCC fence: every settle of an order follows the
// first decision, and every case ends with the invariant, no pending part
// and no mixed outcome.
func TestInvFence(t *testing.T) {
	t.Parallel()
	c := newInvCluster(t, invOpts{})
	const loaded = 30

	reserve := func(t *testing.T, ctx context.Context, id, sku string, qty int64, ttl time.Duration) inventory.Reservation {
		t.Helper()
		res, err := c.inv.Reserve(ctx, id, []inventory.Item{invItem("r", sku, qty)}, "", ttl)
		if err != nil {
			t.Fatalf("Reserve %s: %v", id, err)
		}
		return res
	}
	stock := func(t *testing.T, ctx context.Context, sku string) inventory.StockLevel {
		t.Helper()
		lvl, err := c.inv.GetStock(ctx, "r", sku)
		if err != nil {
			t.Fatalf("GetStock %s: %v", sku, err)
		}
		return lvl
	}

	cases := []struct {
		name string
		// run drives the case on its own SKU (loaded units) and returns
		// the orders it used and the stock it expects at the end.
		run func(t *testing.T, ctx context.Context, sku string) (orders []string, available, confirmed int64)
	}{
		{"confirm-after-cancel", func(t *testing.T, ctx context.Context, sku string) ([]string, int64, int64) {
			reserve(t, ctx, "f-cc", sku, 12, time.Minute)
			if out, err := c.inv.Cancel(ctx, "f-cc"); err != nil || out.Status != inventory.StatusCancelled {
				t.Fatalf("Cancel: %+v, %v", out, err)
			}
			if _, err := c.inv.Confirm(ctx, "f-cc"); !errors.Is(err, inventory.ErrCancelled) {
				t.Fatalf("Confirm after Cancel: err = %v, want ErrCancelled", err)
			}
			// A retried Reserve of the cancelled order takes nothing.
			if _, err := c.inv.Reserve(ctx, "f-cc", []inventory.Item{invItem("r", sku, 12)}, "", time.Minute); !errors.Is(err, inventory.ErrCancelled) {
				t.Fatalf("Reserve after Cancel: err = %v, want ErrCancelled", err)
			}
			return []string{"f-cc"}, loaded, 0
		}},
		{"cancel-after-confirm", func(t *testing.T, ctx context.Context, sku string) ([]string, int64, int64) {
			reserve(t, ctx, "f-ac", sku, 12, time.Minute)
			if out, err := c.inv.Confirm(ctx, "f-ac"); err != nil || out.Status != inventory.StatusConfirmed {
				t.Fatalf("Confirm: %+v, %v", out, err)
			}
			if _, err := c.inv.Cancel(ctx, "f-ac"); !errors.Is(err, inventory.ErrConfirmed) {
				t.Fatalf("Cancel after Confirm: err = %v, want ErrConfirmed", err)
			}
			return []string{"f-ac"}, loaded - 12, 12
		}},
		{"cancel-before-reserve", func(t *testing.T, ctx context.Context, sku string) ([]string, int64, int64) {
			out, err := c.inv.Cancel(ctx, "f-cb")
			if err != nil || out.Status != inventory.StatusCancelled || out.Reason != "tombstone" {
				t.Fatalf("Cancel of an unknown order: %+v, %v; want cancelled/tombstone", out, err)
			}
			if _, err := c.inv.Reserve(ctx, "f-cb", []inventory.Item{invItem("r", sku, 5)}, "", time.Minute); !errors.Is(err, inventory.ErrCancelled) {
				t.Fatalf("Reserve after a tombstone: err = %v, want ErrCancelled", err)
			}
			if lvl := stock(t, ctx, sku); lvl.Available != loaded || lvl.Reserved != 0 {
				t.Fatalf("tombstoned Reserve took stock: %+v", lvl)
			}
			if _, err := c.inv.Confirm(ctx, "f-cb"); !errors.Is(err, inventory.ErrCancelled) {
				t.Fatalf("Confirm of a tombstone: err = %v, want ErrCancelled", err)
			}
			return []string{"f-cb"}, loaded, 0
		}},
		{"double-confirm", func(t *testing.T, ctx context.Context, sku string) ([]string, int64, int64) {
			reserve(t, ctx, "f-dc", sku, 15, time.Minute)
			out1, err := c.inv.Confirm(ctx, "f-dc")
			if err != nil {
				t.Fatalf("first Confirm: %v", err)
			}
			before := stock(t, ctx, sku)
			out2, err := c.inv.Confirm(ctx, "f-dc")
			if err != nil || out2 != out1 || out2.Status != inventory.StatusConfirmed {
				t.Fatalf("second Confirm: %+v, %v; want %+v", out2, err, out1)
			}
			if after := stock(t, ctx, sku); !reflect.DeepEqual(after, before) {
				t.Fatalf("second Confirm changed counters: %+v → %+v", before, after)
			}
			return []string{"f-dc"}, loaded - 15, 15
		}},
		{"double-cancel", func(t *testing.T, ctx context.Context, sku string) ([]string, int64, int64) {
			reserve(t, ctx, "f-dx", sku, 15, time.Minute)
			if _, err := c.inv.Cancel(ctx, "f-dx"); err != nil {
				t.Fatalf("first Cancel: %v", err)
			}
			before := stock(t, ctx, sku)
			out, err := c.inv.Cancel(ctx, "f-dx")
			if err != nil || out.Status != inventory.StatusCancelled {
				t.Fatalf("second Cancel: %+v, %v", out, err)
			}
			if after := stock(t, ctx, sku); !reflect.DeepEqual(after, before) {
				t.Fatalf("second Cancel changed counters: %+v → %+v", before, after)
			}
			return []string{"f-dx"}, loaded, 0
		}},
		{"confirm-unknown", func(t *testing.T, ctx context.Context, sku string) ([]string, int64, int64) {
			if _, err := c.inv.Confirm(ctx, "f-unknown"); !errors.Is(err, inventory.ErrNotFound) {
				t.Fatalf("Confirm of an unknown order: err = %v, want ErrNotFound", err)
			}
			// Confirm leaves no record behind: the id is still usable.
			reserve(t, ctx, "f-unknown", sku, 1, time.Minute)
			if _, err := c.inv.Cancel(ctx, "f-unknown"); err != nil {
				t.Fatalf("Cancel: %v", err)
			}
			return []string{"f-unknown"}, loaded, 0
		}},
		{"expiry-races-confirm", func(t *testing.T, ctx context.Context, sku string) ([]string, int64, int64) {
			return invExpiryRace(t, ctx, c, sku, invRaceLoaded)
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := invCtx(t, 30*time.Second)
			sku := fmt.Sprintf("fence-%d", i)
			l := int64(loaded)
			if tc.name == "expiry-races-confirm" {
				l = invRaceLoaded
			}
			c.load("r", sku, l, 0)
			orders, avail, conf := tc.run(t, ctx, sku)
			lvl := checkInvariant(t, c.inv, "r", sku, l)
			if tc.name != "expiry-races-confirm" && (lvl.Available != avail || lvl.Confirmed != conf || lvl.Reserved != 0) {
				t.Fatalf("end stock %+v; want available %d, confirmed %d, reserved 0", lvl, avail, conf)
			}
			checkNoPending(t, c.clients, orders)
			invCheckDecisions(t, c, orders)
		})
	}
}

// errInvNotConfirmed marks an order the expiry race never confirms.
var errInvNotConfirmed = errors.New("not confirmed by the test")

// invRaceLoaded is the stock of the expiry race: 40 orders of up to 2 × 7.
const invRaceLoaded = 600

// invExpiryRace reserves fresh orders with a 1s TTL and, around their
// deadline, runs Confirm against two reconcilers' RunOnce loops. Each
// order must end confirmed with every part confirmed, or cancelled with
// every part cancelled, and Confirm's answer must match.
func invExpiryRace(t *testing.T, ctx context.Context, c *invCluster, sku string, loaded int64) ([]string, int64, int64) {
	const (
		n   = 40
		ttl = time.Second
	)
	sku2 := sku + "-b"
	c.load("r", sku2, loaded, 0)
	rng := rand.New(rand.NewPCG(1, 2))
	orders := make([]string, n)
	res := make([]inventory.Reservation, n)
	qty := make([]int64, n)
	for i := range orders {
		orders[i] = fmt.Sprintf("race-%d", i)
		qty[i] = 1 + rng.Int64N(7)
		items := []inventory.Item{invItem("r", sku, qty[i])}
		if i%2 == 0 { // two items, so parts sit on several nodes
			items = append(items, invItem("r", sku2, 3))
		}
		var err error
		if res[i], err = c.inv.Reserve(ctx, orders[i], items, "", ttl); err != nil {
			lvl, _ := c.inv.GetStock(ctx, "r", sku2)
			lvl1, _ := c.inv.GetStock(ctx, "r", sku)
			t.Fatalf("Reserve %s: %v\n%+v\n%+v", orders[i], err, lvl, lvl1)
		}
	}
	// Confirm times spread over [deadline-60ms, deadline+60ms] and a few at
	// deadline+grace, when the reconcilers find the parts due.
	var last time.Time
	at := make([]time.Time, n)
	for i := range at {
		off := time.Duration(rng.IntN(121)-60) * time.Millisecond
		if i%8 == 7 {
			off = time.Second + time.Duration(rng.IntN(40))*time.Millisecond
		}
		at[i] = res[i].Deadline.Add(off)
		if res[i].Deadline.After(last) {
			last = res[i].Deadline
		}
	}

	recs := []*rollback.Reconciler{
		c.reconciler(nil, nil, rollback.Settings{Batch: 5}),
		c.reconciler(nil, nil, rollback.Settings{Batch: 5}),
	}
	stopRec := make(chan struct{})
	var recWG sync.WaitGroup
	for _, rec := range recs {
		recWG.Add(1)
		go func() {
			defer recWG.Done()
			invUntil(res[0].Deadline.Add(-100 * time.Millisecond))
			for {
				select {
				case <-stopRec:
					return
				default:
				}
				rec.RunOnce(ctx)
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}

	// Every order i%8 == 3 is never confirmed: only the reconcilers
	// settle it.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range orders {
		if i%8 == 3 {
			errs[i] = errInvNotConfirmed
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			invUntil(at[i])
			_, errs[i] = c.inv.Confirm(ctx, orders[i])
		}()
	}
	wg.Wait()
	// Let the reconcilers run until every part is due and then some.
	invUntil(last.Add(time.Second + 300*time.Millisecond))
	close(stopRec)
	recWG.Wait()
	recs[0].RunOnce(ctx)
	invWaitNoPending(t, c.clients, orders, 5*time.Second)

	status := invCheckDecisions(t, c, orders)
	var confirmed, confirmed2 int64
	nConf, nExp := 0, 0
	for i, err := range errs {
		switch {
		case err == nil:
			nConf++
			if status[orders[i]] != "confirmed" {
				t.Errorf("order %s: Confirm succeeded but the order is %s", orders[i], status[orders[i]])
			}
			confirmed += qty[i]
			if i%2 == 0 {
				confirmed2 += 3
			}
		case errors.Is(err, inventory.ErrExpired), errors.Is(err, errInvNotConfirmed):
			nExp++
			if status[orders[i]] != "cancelled" {
				t.Errorf("order %s: Confirm said expired but the order is %s", orders[i], status[orders[i]])
			}
		default:
			t.Errorf("order %s: Confirm: %v, want success or ErrExpired", orders[i], err)
		}
	}
	t.Logf("expiry race: %d confirmed, %d expired; reconciler stats %+v / %+v", nConf, nExp, recs[0].Stats(), recs[1].Stats())
	lvl := checkInvariant(t, c.inv, "r", sku, loaded)
	if lvl.Confirmed != confirmed || lvl.Reserved != 0 {
		t.Fatalf("stock %+v: want confirmed %d (the confirmed orders), reserved 0", lvl, confirmed)
	}
	lvl2 := checkInvariant(t, c.inv, "r", sku2, loaded)
	if lvl2.Confirmed != confirmed2 || lvl2.Reserved != 0 {
		t.Fatalf("stock of %s: %+v, want confirmed %d, reserved 0", sku2, lvl2, confirmed2)
	}
	return orders, loaded - confirmed, confirmed
}
