package tests

import (
	"errors"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
)

// allCursors returns a cursor at 0 for every queue.
func allCursors(queues int) []inventory.RedoCursor {
	out := make([]inventory.RedoCursor, queues)
	for q := range out {
		out[q] = inventory.RedoCursor{Queue: q}
	}
	return out
}

// TestInvRedoBatch checks what a database consumer reads and acknowledges:
// every queue of a node in one step with route, state and settle time,
// the total limit, refusal of another incarnation, detection of a queue
// that went back under a cursor, and acknowledgements that check the
// incarnation and the part at the offset before changing anything.
func TestInvRedoBatch(t *testing.T) {
	c := newInvCluster(t, invOpts{nodes: 1})
	ctx := invCtx(t, 30*time.Second)
	queues := c.cfg.Inventory.RedoQueues
	c.load("r", "sku-a", 100, 0)
	c.load("r", "sku-b", 100, 0)
	orders := []struct {
		id, sku string
		qty     int64
		settle  string
	}{{"o1", "sku-a", 2, "confirm"}, {"o2", "sku-b", 3, ""}, {"o3", "sku-a", 1, "cancel"}}
	queueOf := map[string]int{}
	for _, o := range orders {
		res, err := c.inv.Reserve(ctx, o.id, []inventory.Item{invItem("r", o.sku, o.qty)}, "", 0)
		if err != nil {
			t.Fatalf("Reserve %s: %v", o.id, err)
		}
		for q := 0; q < queues; q++ {
			if inventory.RedoLogKey(q) == res.Receipts[0].RedoLog {
				queueOf[o.id] = q
			}
		}
		switch o.settle {
		case "confirm":
			_, err = c.inv.Confirm(ctx, o.id)
		case "cancel":
			_, err = c.inv.Cancel(ctx, o.id)
		}
		if err != nil {
			t.Fatalf("%s %s: %v", o.settle, o.id, err)
		}
	}
	inc := c.node("n1").Incarnation()
	if inc == "" {
		t.Fatal("node n1 has no incarnation after the first probe")
	}

	b, err := c.inv.ReadRedoBatch(ctx, "n1", inc, allCursors(queues), 100, 0)
	if err != nil {
		t.Fatalf("ReadRedoBatch: %v", err)
	}
	if b.Incarnation != inc || len(b.Queues) != queues {
		t.Fatalf("ReadRedoBatch: incarnation %q with %d queues, want %q with %d", b.Incarnation, len(b.Queues), inc, queues)
	}
	byOrder := map[string]inventory.RedoEntry{}
	for _, q := range b.Queues {
		if q.Rewound {
			t.Errorf("queue %d reported rewound at cursor 0", q.Queue)
		}
		if int64(len(q.Entries)) != q.Head {
			t.Errorf("queue %d: %d entries, head %d", q.Queue, len(q.Entries), q.Head)
		}
		for i, e := range q.Entries {
			if e.Offset != int64(i+1) {
				t.Errorf("queue %d entry %d has offset %d", q.Queue, i, e.Offset)
			}
			byOrder[e.OrderID] = e
		}
	}
	want := map[string]string{"o1": "confirmed", "o2": "pending", "o3": "cancelled"}
	for _, o := range orders {
		e, ok := byOrder[o.id]
		switch {
		case !ok:
			t.Errorf("order %s: no entry", o.id)
		case e.Route != "r" || e.SKU != o.sku || e.Quantity != o.qty || e.State != want[o.id]:
			t.Errorf("order %s: entry %+v, want route r, sku %s, qty %d, state %s", o.id, e, o.sku, o.qty, want[o.id])
		case (e.State == "pending") != e.SettledAt.IsZero():
			t.Errorf("order %s (%s): settled at %v", o.id, e.State, e.SettledAt)
		case time.Since(e.At) > time.Minute || e.At.After(time.Now().Add(time.Minute)):
			t.Errorf("order %s: reserved at %v, not now", o.id, e.At)
		}
	}

	// The limit counts entries over every queue.
	if b, err := c.inv.ReadRedoBatch(ctx, "n1", inc, allCursors(queues), 1, 0); err != nil {
		t.Fatal(err)
	} else if n := countEntries(b); n != 1 {
		t.Errorf("limit 1: %d entries", n)
	}
	// Another incarnation: its cursors are not applied.
	if b, err := c.inv.ReadRedoBatch(ctx, "n1", "not-"+inc, allCursors(queues), 100, 0); err != nil {
		t.Fatal(err)
	} else if b.Incarnation != inc || len(b.Queues) != 0 {
		t.Errorf("other incarnation: got %q with %d queues, want %q and none", b.Incarnation, len(b.Queues), inc)
	}

	qa := queueOf["o1"]
	first := byOrder["o1"]
	if first.Offset != 1 {
		t.Fatalf("o1 is at offset %d of queue %d, want 1 (first reserve of the queue)", first.Offset, qa)
	}
	cur := func(after int64, part string) []inventory.RedoCursor {
		return []inventory.RedoCursor{{Queue: qa, After: after, PartID: part}}
	}
	for _, tc := range []struct {
		name    string
		cursors []inventory.RedoCursor
		rewound bool
		entries int
	}{
		{"right part at the cursor", cur(1, first.PartID), false, 1},
		{"cursor past the head", cur(3, ""), true, 0},
		{"another part at the cursor", cur(1, "someone-else|x|0"), true, 0},
		{"cursor at the head", cur(2, byOrder["o3"].PartID), false, 0},
	} {
		b, err := c.inv.ReadRedoBatch(ctx, "n1", inc, tc.cursors, 100, 0)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if q := b.Queues[0]; q.Rewound != tc.rewound || len(q.Entries) != tc.entries {
			t.Errorf("%s: rewound %v with %d entries, want %v with %d", tc.name, q.Rewound, len(q.Entries), tc.rewound, tc.entries)
		}
	}

	// Acknowledgements: checked first, never lowered.
	acked := func() int64 {
		b, err := c.inv.ReadRedoBatch(ctx, "n1", inc, cur(0, ""), 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		return b.Queues[0].Acked
	}
	if _, err := c.inv.AckRedoBatch(ctx, "n1", "not-"+inc, cur(1, first.PartID)); !errors.Is(err, inventory.ErrIncarnation) {
		t.Errorf("ack for another incarnation: %v, want ErrIncarnation", err)
	}
	if _, err := c.inv.AckRedoBatch(ctx, "n1", inc, cur(1, "someone-else|x|0")); !errors.Is(err, inventory.ErrRewound) {
		t.Errorf("ack naming another part: %v, want ErrRewound", err)
	}
	if _, err := c.inv.AckRedoBatch(ctx, "n1", inc, cur(3, "")); !errors.Is(err, inventory.ErrInvalid) {
		t.Errorf("ack past the head: %v, want ErrInvalid", err)
	}
	if a := acked(); a != 0 {
		t.Fatalf("refused acknowledgements changed the acked offset to %d", a)
	}
	if got, err := c.inv.AckRedoBatch(ctx, "n1", inc, cur(2, byOrder["o3"].PartID)); err != nil || got[0] != 2 {
		t.Fatalf("ack 2: %v %v", got, err)
	}
	if got, err := c.inv.AckRedoBatch(ctx, "n1", inc, cur(1, first.PartID)); err != nil || got[0] != 2 {
		t.Errorf("ack 1 after 2: %v %v, want 2 kept", got, err)
	}

	// Settled, acknowledged entries are trimmed: a read from before them
	// says how many are gone.
	if n, err := c.inv.TrimRedoLog(ctx, "n1", 0, 100); err != nil || n != 2 {
		t.Fatalf("TrimRedoLog: %d %v, want the 2 settled acknowledged entries of queue %d", n, err, qa)
	}
	if b, err := c.inv.ReadRedoBatch(ctx, "n1", inc, cur(0, ""), 100, 0); err != nil {
		t.Fatal(err)
	} else if q := b.Queues[0]; q.Trimmed != 2 || len(q.Entries) != 0 || q.Rewound {
		t.Errorf("read from 0 after the trim: %+v, want 2 trimmed, no entries", q)
	}
	if b, err := c.inv.ReadRedoBatch(ctx, "n1", inc, cur(1, first.PartID), 100, 0); err != nil {
		t.Fatal(err)
	} else if q := b.Queues[0]; q.Trimmed != 1 || q.Rewound {
		t.Errorf("read from 1 after the trim: %+v, want 1 trimmed (the part at the cursor is gone: not rewound)", q)
	}

	// Part states, read in one step.
	ids := []string{byOrder["o1"].PartID, byOrder["o2"].PartID, byOrder["o3"].PartID, "never|x|0"}
	gotInc, st, err := c.inv.PartStates(ctx, "n1", ids)
	if err != nil {
		t.Fatalf("PartStates: %v", err)
	}
	if gotInc != inc {
		t.Errorf("PartStates incarnation %q, want %q", gotInc, inc)
	}
	for i, w := range []inventory.PartState{inventory.PartConfirmed, inventory.PartPending, inventory.PartCancelled, inventory.PartMissing} {
		if st[i].State != w || (w == inventory.PartConfirmed || w == inventory.PartCancelled) == st[i].SettledAt.IsZero() {
			t.Errorf("part %s: %+v, want state %q", ids[i], st[i], w)
		}
	}
}

func countEntries(b inventory.RedoBatch) int {
	n := 0
	for _, q := range b.Queues {
		n += len(q.Entries)
	}
	return n
}

// TestInvRedoBatchHold: a read with a hold stops each queue before its
// first part still pending for less than the hold by the node's clock, and
// says how long until it is old enough; settled parts and older pending
// ones are read as without a hold.
func TestInvRedoBatchHold(t *testing.T) {
	c := newInvCluster(t, invOpts{nodes: 1})
	ctx := invCtx(t, 30*time.Second)
	c.load("r", "sku-a", 100, 0)
	item := []inventory.Item{invItem("r", "sku-a", 1)}
	if _, err := c.inv.Reserve(ctx, "h1", item, "", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.inv.Cancel(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	res, err := c.inv.Reserve(ctx, "h2", item, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	q := -1
	for i := 0; i < c.cfg.Inventory.RedoQueues; i++ {
		if inventory.RedoLogKey(i) == res.Receipts[0].RedoLog {
			q = i
		}
	}
	inc := c.node("n1").Incarnation()
	cur := []inventory.RedoCursor{{Queue: q}}
	const hold = 3 * time.Second
	b, err := c.inv.ReadRedoBatch(ctx, "n1", inc, cur, 100, hold)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Queues[0]; !got.Held || len(got.Entries) != 1 || got.Entries[0].OrderID != "h1" || b.Wait <= 0 || b.Wait > hold {
		t.Fatalf("read with a hold of %v: %+v, wait %v; want h1's cancelled part, then held before h2's pending one", hold, got, b.Wait)
	}
	if b, err := c.inv.ReadRedoBatch(ctx, "n1", inc, cur, 100, 0); err != nil || len(b.Queues[0].Entries) != 2 || b.Queues[0].Held || b.Wait != 0 {
		t.Fatalf("read without a hold: %+v, %v; want both entries", b, err)
	}
	if b, err := c.inv.ReadRedoBatch(ctx, "n1", inc, cur, 100, time.Millisecond); err != nil || len(b.Queues[0].Entries) != 2 {
		time.Sleep(10 * time.Millisecond) // the reserve may have run within the last millisecond
		if b, err = c.inv.ReadRedoBatch(ctx, "n1", inc, cur, 100, time.Millisecond); err != nil || len(b.Queues[0].Entries) != 2 {
			t.Fatalf("read with a hold shorter than the part's age: %+v, %v; want both entries", b, err)
		}
	}
	if _, err := c.inv.ReadRedoBatch(ctx, "n1", inc, cur, 100, -time.Second); !errors.Is(err, inventory.ErrInvalid) {
		t.Fatalf("negative hold: %v, want ErrInvalid", err)
	}
}
