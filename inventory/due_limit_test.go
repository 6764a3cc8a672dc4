package inventory

import (
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestDuePartsLimit: DueParts' doc: "returns up to limit pending
// parts of n whose deadline has passed". A negative limit must not
// return every due part of the node (ZRANGEBYSCORE ... LIMIT 0 -1 means
// "no limit" to Redis): it returns none, or is refused with ErrInvalid
// (limit 0 returns none, as it should).
func TestDuePartsLimit(t *testing.T) {
	e := newStagedEnv(t)
	c := e.clients["n1"]
	for i := range 5 {
		id := fmt.Sprintf("o%d|t|0", i)
		if err := c.ZAdd(e.ctx, PendingKey, redis.Z{Score: float64(1000 + i), Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	n, err := e.r.Node("n1")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := e.inv.DueParts(e.ctx, n, 0); err != nil || len(got) != 0 {
		t.Errorf("DueParts(n1, 0) = %d parts, %v; want none", len(got), err)
	}
	for _, limit := range []int{-1, 10001} {
		if got, err := e.inv.DueParts(e.ctx, n, limit); !errors.Is(err, ErrInvalid) {
			t.Errorf("DueParts(n1, %d) = %d parts, %v; want ErrInvalid (a negative limit returned every due part)", limit, len(got), err)
		}
	}
}
