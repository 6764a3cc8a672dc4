package inventory

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A reader that decides a staged record failed (resolveStaged: a retry of
// the order id, a Confirm, a Cancel) and whose caller gives up while the
// decision is on its way. The failed record is the only list of the
// attempt's parts that anyone reads again before their deadline (a retry's
// begin writes its own record over it, a Confirm of it answers "took
// nothing"), so the cancels that follow the decision must be sent whatever
// the caller does: else the parts the attempt took stay reserved until
// they come due, its ttl (up to max_reservation_ttl) after the stage.

// TestStagedFailDecidedUnderACutCallerReturnsTheParts stops a one-round
// attempt after its round with one node's takes left out (its record
// staged, two of its three parts taken, held for an hour), lets its lease
// run out, then has a reader decide it failed while the reader's caller
// gives up just as the decision lands (its reply lost to that caller).
// The caller then does what the answer tells it: a retried Reserve
// retries the same order id, which reserves it anew; a Confirm confirms
// again and is told the order holds no reservation. Either way the
// crashed attempt's two parts must be cancelled now, not an hour later:
// before, resolveStaged's failStaged ran under the cut caller's context,
// so the decision landed and no cancel was sent or deferred, and the
// order held its items twice (retry) or held units it answered it did
// not hold (confirm).
func TestStagedFailDecidedUnderACutCallerReturnsTheParts(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t)
	for _, reader := range []string{"retry", "confirm"} {
		t.Run(reader, func(t *testing.T) {
			e.t = t
			id := "cut-" + reader
			before := map[string]int64{}
			for _, rt := range []string{"a", "b", "c"} {
				lvl, err := e.inv.GetStock(e.ctx, rt, "s")
				if err != nil {
					t.Fatal(err)
				}
				before[rt] = lvl.Reserved
			}
			if _, err := e.reserveAtTTL("staged:some-takes", id, time.Hour); !errors.Is(err, ErrCrashed) {
				t.Fatalf("Reserve stopped after its round: %v, want ErrCrashed", err)
			}
			// The attempt's lease runs out: the next reader prevents its
			// missing part and decides the record failed.
			time.Sleep(stagedLease + 50*time.Millisecond)

			cctx, cut := context.WithCancel(e.ctx)
			defer cut()
			hook, decided := landsAsCallerGivesUp(opFail, cut)
			e.faults.call.Store(&hook)
			var err error
			if reader == "retry" {
				_, err = e.inv.Reserve(cctx, id, stagedItems(), "", stagedTTL)
			} else {
				_, err = e.inv.Confirm(cctx, id)
			}
			e.faults.call.Store(nil)
			if !decided.Load() {
				t.Fatalf("the %s never decided the staged record failed: %v", reader, err)
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("the cut %s: %v, want an error wrapping context.Canceled", reader, err)
			}

			// What the caller does next with that answer.
			want := map[string]int64{"a": 0, "b": 0, "c": 0}
			if reader == "retry" {
				res, err := e.inv.Reserve(e.ctx, id, stagedItems(), "", time.Hour)
				if err != nil || len(res.Receipts) != 3 {
					t.Fatalf("Reserve retried after the cut: %+v, %v", res, err)
				}
				want = map[string]int64{"a": 1, "b": 2, "c": 3}
				e.verify(id, "reserved")
			} else {
				if _, err := e.inv.Confirm(e.ctx, id); !errors.Is(err, ErrNotFound) {
					t.Fatalf("Confirm again after the cut: %v, want ErrNotFound", err)
				}
				e.verify(id, "failed")
			}
			for rt, w := range want {
				lvl, err := e.inv.GetStock(e.ctx, rt, "s")
				if err != nil {
					t.Fatal(err)
				}
				if got := lvl.Reserved - before[rt]; got != w {
					t.Errorf("route %s after the cut %s: %+v, %d reserved by it, want %d (the crashed attempt's part held until its deadline, an hour on)", rt, reader, lvl, got, w)
				}
			}
		})
	}
}
