package inventory

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// A failed one-round record whose cancels never landed holds the last
// units of a SKU through its attempt's parts (retry_begin_failed_test.go's
// failedUnsettled): every other unit of the SKUs it holds is reserved by
// another order. A retry of the order id wants exactly the units its own
// failed attempt holds, which the failed record excludes: the retry must
// get them back and reserve the order, not be refused for a shortage made
// of its own dead attempt's units (every retry refused until those parts
// come due, the attempt's ttl on, up to max_reservation_ttl).

// drainHeld reserves, under order filler, every unit of each route that
// held (units per route beyond the start) names still available, and
// returns those routes.
func (e *stagedEnv) drainHeld(held map[string]int64, filler string) []string {
	e.t.Helper()
	var items []Item
	var routes []string
	for _, rt := range []string{"a", "b", "c"} {
		if held[rt] == 0 {
			continue
		}
		lvl, err := e.inv.GetStock(e.ctx, rt, "s")
		if err != nil {
			e.t.Fatal(err)
		}
		items = append(items, Item{Route: rt, SKU: "s", Quantity: lvl.Available})
		routes = append(routes, rt)
	}
	if _, err := e.inv.Reserve(e.ctx, filler, items, "", time.Hour); err != nil {
		e.t.Fatalf("Reserve of the rest of the stock: %v", err)
	}
	return routes
}

// settlesSlow is a callHook that holds every settle call 200 ms before
// sending it: cancels that land after the takes sent at the same time.
func settlesSlow(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
	if c.Script == settleScript.name {
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return send()
}

// TestRetryOverAFailedRecordGetsItsOwnUnitsBack: the retry reaches the
// general path, whose begin replaces the failed record (its parts handed
// back), or is first read against the stock because the SKU was refused
// lately (refuseShort, soldout.go). Before, the begin's cancels ran off
// the retry's path, beside its takes, which found the units still held
// and refused the order ("plain": as it runs, refused in 2 runs of 3;
// "slow-cancels": the cancels 200 ms slower than the takes, refused every
// time); and the reads refused it behind the
// failed record as a fence without ever replacing it ("hint"), so every
// retry was refused while the failed attempt's units stayed held.
func TestRetryOverAFailedRecordGetsItsOwnUnitsBack(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"slow-cancels", "hint", "plain"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := newStagedEnv(t)
			id := "retry-short-" + how
			e.failedUnsettled(id)
			held := e.reservedBy(nil)
			routes := e.drainHeld(held, "filler-"+how)
			if how == "hint" {
				// another order refused for the SKU marks it sold out
				other := []Item{{Route: routes[0], SKU: "s", Quantity: 1}}
				if _, err := e.inv.Reserve(e.ctx, "other-"+how, other, "", time.Hour); !errors.Is(err, ErrInsufficientStock) {
					t.Fatalf("Reserve of a drained route: %v, want ErrInsufficientStock", err)
				}
			} else if how == "slow-cancels" {
				h := callHook(settlesSlow)
				e.faults.call.Store(&h)
			}
			res, err := e.inv.Reserve(e.ctx, id, stagedItems(), "", time.Hour)
			e.faults.call.Store(nil)
			if err != nil || len(res.Receipts) != 3 {
				t.Fatalf("Reserve retried over its failed record holding %v: %+v, %v (want the order reserved by its own units)",
					held, res, err)
			}
			e.inv.Close()
			if out, err := e.inv.Cancel(e.ctx, id); err != nil || out.PendingParts != 0 {
				t.Fatalf("Cancel of the retried order: %+v, %v", out, err)
			}
			e.verify(id, "cancelled")
			e.stock()
		})
	}
}

// TestRetryGivingUpEndsItsWaitForTheReplacedCancels: the retry's begin
// replaces a failed record whose parts were never cancelled, and the
// node holding them answers settles 1.5 s late. A caller whose deadline
// passes meanwhile ends its own wait (the package doc's rule for a caller
// that gives up): Reserve answers by about its deadline, not after the
// cancels; the cancels still land, detached.
func TestRetryGivingUpEndsItsWaitForTheReplacedCancels(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t)
	id := "retry-gives-up"
	e.failedUnsettled(id)
	dead := id + "|" + orderFieldsOn(t, e.ctx, e.clients[e.homeName(id)], id)["token"] + "|"
	h := callHook(func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if c.Script == settleScript.name && slices.ContainsFunc(c.Args, func(a any) bool {
			s, _ := a.(string)
			return strings.HasPrefix(s, dead)
		}) {
			select {
			case <-time.After(1500 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return send()
	})
	e.faults.call.Store(&h)
	ctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
	start := time.Now()
	_, err := e.inv.Reserve(ctx, id, stagedItems(), "", time.Hour)
	took := time.Since(start)
	cancel()
	if err == nil || took > time.Second {
		t.Errorf("Reserve with a 300ms deadline over slow cancels: %v after %v, want its deadline's error within 1s", err, took)
	}
	e.inv.Close() // the cancels ran on, detached
	e.faults.call.Store(nil)
	e.wantReserved(nil, map[string]int64{}, "after the retry gave up")
	e.stock()
}
