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
