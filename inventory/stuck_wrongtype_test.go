package inventory

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestStuckPartsWrongTypeRecord: a set-aside part whose record key
// holds a value of the wrong type (neither the packed string nor the hash
// layout: a list) is a corrupt record (ErrCorrupt's doc: "a key of the
// wrong type: ... WRONGTYPE replies"). StuckPart's doc: "A part is often
// set aside because its record is corrupt: it is listed all the same, as
// are the others." StuckParts must list it with a Problem and list the
// other parts, not fail as a whole.
func TestStuckPartsWrongTypeRecord(t *testing.T) {
	e := newStagedEnv(t)
	c := e.clients["n1"]
	bad, good := "o1|t1|0", "o2|t2|0"
	for i, id := range []string{bad, good} {
		if err := c.ZAdd(e.ctx, keyStuck, redis.Z{Score: float64(i + 1), Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
		c.HSet(e.ctx, keyStuckWhy, id, "why")
	}
	if err := c.RPush(e.ctx, partKey(bad), "x").Err(); err != nil {
		t.Fatal(err)
	}
	c.HSet(e.ctx, partKey(good), "state", "pending", "order", "o2", "sku", "s", "qty", "2")
	got, err := e.inv.StuckParts(e.ctx, "n1", 10)
	if err != nil || len(got) != 2 {
		t.Fatalf("StuckParts = %+v, %v; want both parts listed (the wrong-type record with a Problem)", got, err)
	}
	if got[0].Problem == "" {
		t.Errorf("wrong-type record listed as %+v; want a Problem", got[0])
	}
	if got[1].Problem != "" || got[1].Quantity != 2 {
		t.Errorf("readable record listed as %+v; want o2's part of 2 units", got[1])
	}
}
