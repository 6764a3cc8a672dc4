package inventory

import (
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestTrimRedoLogBatch: TrimRedoLog's doc: it "removes ... up to
// batch entries per queue". With a batch of 0 (or below) it must remove
// none (or refuse with ErrInvalid), not every trimmable entry of a queue's
// own key (ZRANGE key 0 -1 is the whole set).
func TestTrimRedoLogBatch(t *testing.T) {
	e := newStagedEnv(t)
	c := e.clients["n1"]
	q := 3
	xk := RedoLogKey(q)
	for off := 1; off <= 5; off++ {
		// entries of the release before the segments, whose parts' records
		// are gone (settled and past retention)
		if err := c.ZAdd(e.ctx, xk, redis.Z{Score: float64(off), Member: fmt.Sprintf("o%d|t|0", off)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.HSet(e.ctx, RedoOffsetsKey, xk, 5).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.inv.AckRedoLog(e.ctx, "n1", q, 5); err != nil {
		t.Fatal(err)
	}
	for _, batch := range []int{0, -2} {
		removed, err := e.inv.TrimRedoLog(e.ctx, "n1", 0, batch)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("TrimRedoLog(batch %d) removed %d entries, %v; want ErrInvalid (batch 0 trimmed a whole queue)", batch, removed, err)
		}
	}
	left, err := c.ZCard(e.ctx, xk).Result()
	if err != nil {
		t.Fatal(err)
	}
	if left != 5 {
		t.Errorf("%d of the queue's 5 entries left after trims of batch 0 and -2; want all 5", left)
	}
}

// TestTrimRedoLogStepMore checks RedoTrim.More: true when a queue had a
// whole batch removed and met no entry that must stay, false once every
// queue stopped at one (unacknowledged) or ran out; the calls it asks for
// remove only what a single large one would. Found by a review: a trim
// did not say whether a queue held more, and the reconciler, calling once
// per trim, let a queue settling more than a batch between trims grow
// without bound.
func TestTrimRedoLogStepMore(t *testing.T) {
	e := newStagedEnv(t)
	c := e.clients["n1"]
	q := 3
	xk := RedoLogKey(q)
	for off := 1; off <= 8; off++ {
		// entries whose parts' records are gone (settled and past retention)
		if err := c.ZAdd(e.ctx, xk, redis.Z{Score: float64(off), Member: fmt.Sprintf("o%d|t|0", off)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.HSet(e.ctx, RedoOffsetsKey, xk, 8).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.inv.AckRedoLog(e.ctx, "n1", q, 5); err != nil {
		t.Fatal(err)
	}
	var got []RedoTrim
	for range 4 {
		tr, err := e.inv.TrimRedoLogStep(e.ctx, "n1", 0, 2)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, tr)
	}
	// 1-2 and 3-4 whole batches; 5, then 6 is not acknowledged
	want := []RedoTrim{{2, true}, {2, true}, {1, false}, {0, false}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("TrimRedoLogStep(batch 2) × 4 = %v; want %v", got, want)
	}
	if left, err := c.ZCard(e.ctx, xk).Result(); err != nil || left != 3 {
		t.Errorf("%d entries left (%v); want the 3 unacknowledged ones (6-8)", left, err)
	}
	if _, err := e.inv.AckRedoLog(e.ctx, "n1", q, 8); err != nil {
		t.Fatal(err)
	}
	// a queue whose last batch empties it exactly may hold more: one more
	// call says it does not
	for _, want := range []RedoTrim{{3, true}, {0, false}} {
		if tr, err := e.inv.TrimRedoLogStep(e.ctx, "n1", 0, 3); err != nil || tr != want {
			t.Errorf("TrimRedoLogStep(batch 3) after the ack of 8 = %+v, %v; want %+v", tr, err, want)
		}
	}
}
