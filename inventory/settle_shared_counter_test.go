package inventory

import (
	"strconv"
	"testing"
	"time"
)

// Two parts of one order can hold units of the same counter: two items of
// the same SKU and route. A settle of both runs in one script (settle.lua
// for parts with their own records, the decision's inline_settle for
// parts held in the order's record), which checked each part against the
// counter on its own: a reserved of 4 passed a part of 2 and a part of 3,
// and the settle then took 5 out of it. A counter that holds fewer units
// than its pending parts is already wrong (a hand edit, a restore that
// mixed copies), but the settle made it worse: reserved went to -1 and the
// 5 units went back to available, one of them from nowhere, which a later
// order sells. Now the parts of one script are checked against the counter
// together (stock_settle_check's claimed, inline_settle's need): the
// settle is refused before any write, naming the counter, and reserved
// stays as it was for the operator to repair.
func TestPartsSharingACounterAreCheckedTogether(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inline bool
	}{{"own records", false}, {"inline", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // its own nodes
			sharedCounterSettle(t, tc.inline)
		})
	}
}

func sharedCounterSettle(t *testing.T, inline bool) {
	e := newStagedEnv(t)
	home := "n2"
	if inline {
		home = "n1" // route a's node: the local reserve keeps the parts in the order's record
	}
	id := e.homedOn("sc", home)
	items := []Item{{Route: "a", SKU: "s", Quantity: 2}, {Route: "a", SKU: "s", Quantity: 3}}
	if _, err := e.inv.Reserve(e.ctx, id, items, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	n1, ck := e.clients["n1"], stockKey("a", "s")
	tok := orderFieldsOn(t, e.ctx, e.clients[home], id)["token"]
	for i := range items {
		p := stockPartID(id, tok, i)
		if own := n1.Exists(e.ctx, partKey(p)).Val() == 1; own == inline {
			t.Fatalf("part %s has a record of its own: %v, want %v", p, own, !inline)
		}
	}
	if r := n1.HGet(e.ctx, ck, "reserved").Val(); r != "5" {
		t.Fatalf("reserved %s after the order of 2+3, want 5", r)
	}
	// the counter lost a unit of what the parts hold
	if err := n1.HSet(e.ctx, ck, "reserved", 4).Err(); err != nil {
		t.Fatal(err)
	}
	avail := n1.HGet(e.ctx, ck, "available").Val()
	out, err := e.inv.Cancel(e.ctx, id)
	t.Logf("Cancel over reserved 4 for parts of 2 and 3: %+v, %v", out, err)
	f := n1.HGetAll(e.ctx, ck).Val()
	r, _ := strconv.ParseInt(f["reserved"], 10, 64)
	if r < 0 {
		t.Errorf("%s after the Cancel: %v; reserved below 0, the settle gave back %d units no part held", ck, f, -r)
	}
	if r != 4 || f["available"] != avail {
		t.Errorf("%s after the Cancel: %v, want reserved 4 and available %s (the settle refused before any write)", ck, f, avail)
	}
}
