package inventory

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestDecisionLandingUnderACutCallerSettlesItsParts: a Confirm or Cancel
// whose decision lands on the order's home while its caller gives up (the
// reply lost to that caller). The decision was sent under the caller's
// context, so Confirm and Cancel returned the context's error and sent no
// settle and deferred none: the parts on the other nodes stayed reserved
// until they came due, the order's ttl after it was reserved (an hour
// here, up to max_reservation_ttl), though the order was decided. Now the
// decision, once sent, runs to its reply whatever the caller does (within
// commitTimeout), and the settles after it too (the package doc's rule
// for a caller that gives up).
func TestDecisionLandingUnderACutCallerSettlesItsParts(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t)
	for _, op := range []orderOp{opCancel, opConfirm} {
		t.Run(string(op), func(t *testing.T) {
			e.t = t
			before := map[string][2]int64{}
			for _, rt := range []string{"a", "b", "c"} {
				lvl, err := e.inv.GetStock(e.ctx, rt, "s")
				if err != nil {
					t.Fatal(err)
				}
				before[rt] = [2]int64{lvl.Reserved, lvl.Confirmed}
			}
			id := "cut-decide-" + string(op)
			if _, err := e.inv.Reserve(e.ctx, id, stagedItems(), "", time.Hour); err != nil {
				t.Fatal(err)
			}
			cctx, cut := context.WithCancel(e.ctx)
			defer cut()
			hook, decided := landsAsCallerGivesUp(op, cut)
			e.faults.call.Store(&hook)
			var out Outcome
			var err error
			if op == opCancel {
				out, err = e.inv.Cancel(cctx, id)
			} else {
				out, err = e.inv.Confirm(cctx, id)
			}
			e.faults.call.Store(nil)
			t.Logf("%s under a caller that gave up as it landed: %+v, %v", op, out, err)
			if !decided.Load() {
				t.Fatalf("the %s never sent its decision: %v", op, err)
			}
			want := "cancelled"
			if op == opConfirm {
				want = "confirmed"
			}
			e.verify(id, want)
			for i, rt := range []string{"a", "b", "c"} {
				lvl, err := e.inv.GetStock(e.ctx, rt, "s")
				if err != nil {
					t.Fatal(err)
				}
				conf := int64(0)
				if op == opConfirm {
					conf = int64(i + 1)
				}
				if r, c := lvl.Reserved-before[rt][0], lvl.Confirmed-before[rt][1]; r != 0 || c != conf {
					t.Errorf("route %s after the %s: %+v, %d reserved and %d confirmed by the order, want 0 and %d "+
						"(its part held until its deadline, an hour on)", rt, op, lvl, r, c, conf)
				}
			}
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v, want no error or one wrapping context.Canceled", op, err)
			}
		})
	}
}
