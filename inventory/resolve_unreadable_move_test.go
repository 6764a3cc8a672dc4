package inventory

import (
	"fmt"
	"testing"
	"time"
)

// A due part whose order's record on its previous home (a move stopped
// part way, at move-out) cannot be read is data to repair: ResolveExpired
// returns the error (Unsettleable), so the reconciler sets the part
// aside. It was postponed every few seconds for good, never set aside,
// never listed.
func TestResolveExpiredSetsAsideAnUnreadableRecordOfAMove(t *testing.T) {
	t.Parallel() // its own nodes; it mostly waits
	e := newMigrateEnv(t)
	old := e.open(e.old)
	if _, err := old.LoadStock(e.ctx, "r", "free", 10, 0); err != nil {
		t.Fatal(err)
	}
	oh, _ := NewHomes(e.old)
	nh, _ := NewHomes(e.new)
	id := ""
	for i := 0; id == ""; i++ {
		if c := fmt.Sprintf("x-%d", i); nh.Home(c) == "n4" && oh.Home(c) != "n4" {
			id = c
		}
	}
	if _, err := old.Reserve(e.ctx, id, []Item{{Route: "r", SKU: "free", Quantity: 6}}, "", time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := e.applyWith(crashAtPoint("move-out")); err == nil {
		t.Fatal("the apply stopped at move-out succeeded")
	}
	c := e.clients[oh.Home(id)]
	if err := c.Del(e.ctx, orderKey(id)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.RPush(e.ctx, orderKey(id), "x").Err(); err != nil {
		t.Fatal(err)
	}
	inv := e.open(e.new)
	time.Sleep(2500 * time.Millisecond) // due
	found := 0
	for _, n := range inv.Members(e.ctx) {
		due, err := inv.DueParts(e.ctx, n, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range due {
			if p.OrderID != id {
				continue
			}
			found++
			res, err := inv.ResolveExpired(e.ctx, p)
			if res == Postponed || !Unsettleable(err) {
				t.Errorf("ResolveExpired(%s on %s) = %q, %v; want the error, Unsettleable, and no resolution", p.PartID, n.Name(), res, err)
			}
		}
	}
	if found == 0 {
		t.Fatal("no part of the order came due")
	}
}
