package inventory

import (
	"math"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestReadRedoLogHugeAfter: ReadRedoLog's doc: "returns up to limit
// entries of queue ... with offset > after". An entry at offset 1 (kept
// in the queue's own key, as the release before the segments wrote it)
// is not past an after of math.MaxInt64; nor may such an after be taken
// as "from the start" (it is refused with ErrInvalid, or reads nothing).
func TestReadRedoLogHugeAfter(t *testing.T) {
	e := newStagedEnv(t)
	c := e.clients["n1"]
	q := 7
	xk := RedoLogKey(q)
	if err := c.ZAdd(e.ctx, xk, redis.Z{Score: 1, Member: "o|t|0"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(e.ctx, RedoOffsetsKey, xk, 1).Err(); err != nil {
		t.Fatal(err)
	}
	all, err := e.inv.ReadRedoLog(e.ctx, "n1", q, 0, 10)
	if err != nil || len(all) != 1 || all[0].Offset != 1 {
		t.Fatalf("ReadRedoLog after 0 = %+v, %v; want the entry at offset 1", all, err)
	}
	for _, after := range []int64{math.MaxInt64, 1 << 62} {
		got, err := e.inv.ReadRedoLog(e.ctx, "n1", q, after, 10)
		if err != nil || len(got) != 0 {
			t.Errorf("ReadRedoLog after %d = %+v, %v; want no entry (it read the queue from its start)", after, got, err)
		}
	}
}
