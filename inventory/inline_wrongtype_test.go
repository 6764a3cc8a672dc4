package inventory

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestInlineDecisionOverWrongTypeCounter: inline.go's rule "a counter
// settle.lua would refuse makes a decision write them all pending
// instead, for that settle to refuse" holds for a counter of the wrong
// type too: the Cancel or Confirm of a locally reserved (inline) order
// whose counter is not a hash is recorded, its part written pending, and
// the settle of that part refuses naming the node and the key. Before,
// inline_settle's bare HGET raised WRONGTYPE, failing the whole decision
// script: the Cancel and Confirm failed and the record stayed reserved.
func TestInlineDecisionOverWrongTypeCounter(t *testing.T) {
	e := newStagedEnv(t)
	items := []Item{{Route: "a", SKU: "s", Quantity: 2}}
	ids := map[Action]string{Cancel: e.homedOn("inlc", "n1"), Confirm: e.homedOn("inlf", "n1")}
	c := e.clients["n1"]
	for _, id := range ids {
		if _, err := e.inv.Reserve(e.ctx, id, items, "", time.Hour); err != nil {
			t.Fatal(err)
		}
		if n, _ := c.Keys(e.ctx, partKey(id+"|*")).Result(); len(n) != 0 {
			t.Fatalf("want an inline part (no part key), found %v", n)
		}
	}
	// the counter replaced by a value of another type
	ck := StockKey("a", "s")
	if err := c.Del(e.ctx, ck).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(e.ctx, ck, "junk", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for a, id := range ids {
		decide, want := e.inv.Cancel, "cancelled"
		if a == Confirm {
			decide, want = e.inv.Confirm, "confirmed"
		}
		out, err := decide(e.ctx, id)
		if err != nil {
			t.Errorf("%s of %s = %+v, %v; want the decision recorded", a, id, out, err)
		}
		if f := orderFieldsOn(t, e.ctx, c, id); f["status"] != want {
			t.Errorf("order %s is %q after %s; want %s", id, f["status"], a, want)
		}
		keys, _ := c.Keys(e.ctx, partKey(id+"|*")).Result()
		if len(keys) != 1 {
			t.Fatalf("part records of %s after %s: %v; want its part written", id, a, keys)
		}
		pid := strings.TrimPrefix(keys[0], partKey(""))
		if st := partFieldsOn(t, e.ctx, c, pid)["state"]; st != "pending" {
			t.Errorf("part %s after %s: %s; want pending, for the settle to refuse", pid, a, st)
		}
		res, err := e.inv.SettleNow(e.ctx, Settle{Node: "n1", Action: a, OrderID: id, PartIDs: []string{pid}})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "n1") || !strings.Contains(err.Error(), ck) {
			t.Errorf("settle of %s over the wrong-type counter = %v, %v; want ErrCorrupt naming node n1 and %s", pid, res, err, ck)
		}
	}
}
