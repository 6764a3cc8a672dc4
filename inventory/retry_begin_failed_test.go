package inventory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A one-round attempt decided failed whose cancels never landed: the
// reader that decided it (or the attempt itself) died right after its
// fail, so the failed record is the only list of the attempt's parts,
// which stay pending on their nodes. A retry of the order id takes the
// general path (a stage never writes over a record), whose begin writes
// its own record over the failed one: the begin must hand back the parts
// of the record it replaced so that they are cancelled now, not when
// they come due, the attempt's ttl (up to max_reservation_ttl) on.

// settlesDropped is a callHook that loses every settle call before it
// reaches its node: the actor died after its decision landed.
func settlesDropped(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
	if c.Script == settleScript.name {
		return nil, fmt.Errorf("settle on %s not sent: %w", c.Node, ErrCrashed)
	}
	return send()
}

// reservedBy returns, per route, the units reserved beyond before.
func (e *stagedEnv) reservedBy(before map[string]int64) map[string]int64 {
	e.t.Helper()
	out := map[string]int64{}
	for _, rt := range []string{"a", "b", "c"} {
		lvl, err := e.inv.GetStock(e.ctx, rt, "s")
		if err != nil {
			e.t.Fatal(err)
		}
		out[rt] = lvl.Reserved - before[rt]
	}
	return out
}

// decideFailedDying waits out the staged attempt's lease of order id and
// has a Confirm of another instance decide its record failed and die
// before its cancels.
func (e *stagedEnv) decideFailedDying(id string) {
	e.t.Helper()
	time.Sleep(stagedLease + 50*time.Millisecond)
	dying := &crashPoint{}
	h := callHook(settlesDropped)
	dying.call.Store(&h)
	if _, err := e.faultyInstance(dying).Confirm(e.ctx, id); !errors.Is(err, ErrNotFound) {
		e.t.Fatalf("Confirm deciding the staged record: %v, want ErrNotFound", err)
	}
}

// failedUnsettled leaves order id's record failed with two parts of its
// one-round attempt still pending (held for an hour): the attempt stops
// after its round with one node's takes left out, its lease runs out,
// and a Confirm of another instance decides it failed and dies before
// its cancels.
func (e *stagedEnv) failedUnsettled(id string) {
	e.t.Helper()
	if _, err := e.reserveAtTTL("staged:some-takes", id, time.Hour); !errors.Is(err, ErrCrashed) {
		e.t.Fatalf("Reserve stopped after its round: %v, want ErrCrashed", err)
	}
	e.decideFailedDying(id)
	if got := e.reservedBy(nil); got["a"]+got["b"]+got["c"] == 0 {
		e.t.Fatalf("the failed attempt's parts were cancelled already: %v", got)
	}
}

// TestRetryOverAFailedRecordReturnsItsParts: a failed record whose parts
// were never cancelled, then a Reserve retry of the order id (its items
// again, or one item of the home's route alone, which the home could meet
// by itself), then the order's Confirm or Cancel. The retry replaces the
// record; the failed attempt's parts must be cancelled by then (before,
// they stayed reserved until their deadline an hour on, the order's units
// held twice while the retry's reservation ran, and after its Confirm or
// Cancel), and the retry's own parts must follow the retry's record. A
// Confirm of the failed record, with no retry, answers ErrNotFound ("took
// nothing") and must cancel them too.
func TestRetryOverAFailedRecordReturnsItsParts(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t)
	routeOf := map[string]string{"n1": "a", "n2": "b", "n3": "c"}
	for _, then := range []string{"confirm", "cancel", "local", "confirm-failed"} {
		t.Run(then, func(t *testing.T) {
			e.t = t
			id := "retry-over-failed-" + then
			before := e.reservedBy(nil)
			e.failedUnsettled(id)
			want := map[string]int64{}
			if then == "confirm-failed" {
				if _, err := e.inv.Confirm(e.ctx, id); !errors.Is(err, ErrNotFound) {
					t.Fatalf("Confirm of the failed order: %v, want ErrNotFound", err)
				}
				e.wantReserved(before, want, "after the Confirm")
				e.verify(id, "failed")
				e.stock()
				return
			}
			items := stagedItems()
			if then == "local" {
				rt := routeOf[e.homeName(id)]
				items = []Item{{Route: rt, SKU: "s", Quantity: 5}}
				want[rt] = 5
			} else {
				want = map[string]int64{"a": 1, "b": 2, "c": 3}
			}
			res, err := e.inv.Reserve(e.ctx, id, items, "", time.Hour)
			if err != nil || len(res.Receipts) != len(items) {
				t.Fatalf("Reserve retried over the failed record: %+v, %v", res, err)
			}
			e.inv.Close() // the cancels run off the retry's path
			e.wantReserved(before, want, "after the retry")
			e.verify(id, "reserved")
			var out Outcome
			final := "cancelled"
			if then == "confirm" {
				out, err = e.inv.Confirm(e.ctx, id)
				final = "confirmed"
			} else {
				out, err = e.inv.Cancel(e.ctx, id)
			}
			if err != nil || out.PendingParts != 0 {
				t.Fatalf("%s after the retry: %+v, %v", final, out, err)
			}
			e.wantReserved(before, map[string]int64{}, "after the order was "+final)
			e.verify(id, final)
			e.stock()
		})
	}
}

// wantReserved checks the units reserved per route beyond before are want
// (0 for a route it leaves out).
func (e *stagedEnv) wantReserved(before, want map[string]int64, when string) {
	e.t.Helper()
	for rt, got := range e.reservedBy(before) {
		if got != want[rt] {
			e.t.Errorf("route %s %s: %d reserved by the order, want %d (the failed attempt's parts held until their deadline, an hour on)",
				rt, when, got, want[rt])
		}
	}
}

// TestFallbackSettlesItsOneRoundPartsOnce: a one-round attempt whose take
// on one node never reached it decides its record failed and cancels its
// parts, then the same Reserve call takes the general path, whose begin
// replaces that failed record and answers with its parts. They were all
// cancelled just before, by this call: no part of the order may be sent
// to a settle twice (a second cancel is harmless to the stock, but costs
// the fallback a round and writes a tombstone for every promised part
// that was never taken).
func TestFallbackSettlesItsOneRoundPartsOnce(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t)
	id := e.homedOn("fallback", "n1")
	var mu sync.Mutex
	settled := map[string]int{}
	var lost atomic.Bool
	h := callHook(func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if c.Script == reserveScript.name && c.Node == "n3" && lost.CompareAndSwap(false, true) {
			return nil, fmt.Errorf("take on n3 never sent: %w", ErrCrashed)
		}
		if c.Script == settleScript.name {
			mu.Lock()
			for _, a := range c.Args {
				if s, _ := a.(string); strings.HasPrefix(s, id+"|") {
					settled[s]++
				}
			}
			mu.Unlock()
		}
		return send()
	})
	e.faults.call.Store(&h)
	res, err := e.inv.Reserve(e.ctx, id, stagedItems(), "", time.Hour)
	e.inv.Close() // anything sent off the call's path
	e.faults.call.Store(nil)
	if err != nil || len(res.Receipts) != 3 || !lost.Load() {
		t.Fatalf("Reserve after its one-round take on n3 was lost: %+v, %v (lost %v)", res, err, lost.Load())
	}
	if len(settled) == 0 {
		t.Fatal("the one-round attempt cancelled nothing: it did not fall back as the test wants")
	}
	for p, n := range settled {
		if n != 1 {
			t.Errorf("part %s sent to %d settles, want 1", p, n)
		}
	}
	e.verify(id, "reserved")
	e.stock()
}

// TestRetryWhoseBeginReplyIsLostReturnsTheFailedAttemptsParts: the retry's
// begin replaces the failed record (whose parts were never cancelled) but
// its reply is lost (the caller's deadline, a timeout): the retry cannot
// read the list it replaced and releases its attempt (releaseLease). The
// failed attempt's parts must still be cancelled by the next attempt of
// the order, not stay held beside it until they come due, an hour on:
// by a retry, by a Confirm, and by a retry taking over the attempt's
// record once its lease ran out when its release was lost too (the
// caller died: "taken-over").
func TestRetryWhoseBeginReplyIsLostReturnsTheFailedAttemptsParts(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t)
	for _, then := range []string{"retry", "confirm", "taken-over"} {
		t.Run(then, func(t *testing.T) {
			e.t = t
			id := "begin-lost-" + then
			before := e.reservedBy(nil)
			e.failedUnsettled(id)
			var lost atomic.Bool
			h := callHook(func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
				if c.Script == orderScript.name && len(c.Args) > 0 && c.Args[0] == string(opBegin) && lost.CompareAndSwap(false, true) {
					if _, err := send(); err != nil {
						return nil, err
					}
					return nil, fmt.Errorf("begin on %s: reply lost: %w", c.Node, context.DeadlineExceeded)
				}
				if then == "taken-over" && c.Script == orderDecideScript.name && len(c.Args) > 0 && c.Args[0] == string(opRelease) {
					return nil, fmt.Errorf("release on %s not sent: %w", c.Node, ErrCrashed)
				}
				return send()
			})
			e.faults.call.Store(&h)
			_, err := e.inv.Reserve(e.ctx, id, stagedItems(), "", time.Hour)
			e.faults.call.Store(nil)
			if err == nil || !lost.Load() {
				t.Fatalf("Reserve whose begin's reply was lost: %v (lost %v), want an error", err, lost.Load())
			}
			want := map[string]int64{}
			if then == "confirm" {
				if _, err := e.inv.Confirm(e.ctx, id); !errors.Is(err, ErrNotFound) {
					t.Fatalf("Confirm of the released attempt: %v, want ErrNotFound", err)
				}
				e.wantReserved(before, want, "after the Confirm")
				e.verify(id, "failed")
				return
			}
			res, err := e.inv.Reserve(e.ctx, id, stagedItems(), "", time.Hour)
			if err != nil || len(res.Receipts) != 3 {
				t.Fatalf("Reserve retried after the lost begin: %+v, %v", res, err)
			}
			e.inv.Close()
			e.wantReserved(before, map[string]int64{"a": 1, "b": 2, "c": 3}, "after the retry")
			e.verify(id, "reserved")
			if out, err := e.inv.Cancel(e.ctx, id); err != nil || out.PendingParts != 0 {
				t.Fatalf("Cancel after the retry: %+v, %v", out, err)
			}
			e.wantReserved(before, want, "after the Cancel")
			e.stock()
		})
	}
}
