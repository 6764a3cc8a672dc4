package inventory

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestStagedGroupsShareContexts: one-round orders of one hot SKU, queued
// on paused nodes, go in groups whose calls share their contexts
// (group.go, "Contexts"): the takes on the stock's node, the stages of no
// part on the orders' homes, and the stages that take the home's part
// too. Every order is reserved with its own receipts at offsets that
// follow each other without a gap per queue, every part is confirmed
// once, and the stock adds up: a call of a run read its own keys and
// arguments, and the run's context, whichever call brought it.
func TestStagedGroupsShareContexts(t *testing.T) {
	e := newStagedEnv(t) // its probes get envProbeTimeout (envConfig)
	before := e.inv.Stats()
	const orders = 24 // half of 1 item on a, half of 1 each on a and b
	items := func(i int) []Item {
		if i%2 == 0 {
			return []Item{{Route: "a", SKU: "s", Quantity: 1}}
		}
		return []Item{{Route: "a", SKU: "s", Quantity: 1}, {Route: "b", SKU: "s", Quantity: 1}}
	}
	for _, c := range e.clients {
		if err := c.Do(e.ctx, "CLIENT", "PAUSE", 300, "ALL").Err(); err != nil {
			t.Fatal(err)
		}
	}
	res := make([]Reservation, orders)
	errs := make([]error, orders)
	var wg sync.WaitGroup
	for i := range orders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = e.inv.Reserve(e.ctx, fmt.Sprintf("hot-%d", i), items(i), "", time.Minute)
		}()
	}
	wg.Wait()
	offsets := map[string]map[int64]bool{} // node and redo queue → offsets handed out
	for i, err := range errs {
		if err != nil {
			t.Fatalf("order hot-%d: %v", i, err)
		}
		want := items(i)
		if len(res[i].Receipts) != len(want) {
			t.Fatalf("order hot-%d: receipts %+v for %d items", i, res[i].Receipts, len(want))
		}
		for j, r := range res[i].Receipts {
			if r.ItemIndex != j || r.Quantity != 1 || r.SKU != "s" || r.Node != map[string]string{"a": "n1", "b": "n2"}[want[j].Route] {
				t.Fatalf("order hot-%d: receipt %d is %+v, want item %d's", i, j, r, j)
			}
			q := r.Node + " " + r.RedoLog
			if offsets[q] == nil {
				offsets[q] = map[int64]bool{}
			}
			if offsets[q][r.Offset] {
				t.Fatalf("order hot-%d: redo %s offset %d handed out twice", i, q, r.Offset)
			}
			offsets[q][r.Offset] = true
		}
	}
	for q, offs := range offsets {
		lo := int64(-1)
		for o := range offs {
			if lo < 0 || o < lo {
				lo = o
			}
		}
		for o := lo; o < lo+int64(len(offs)); o++ {
			if !offs[o] {
				t.Fatalf("redo %s: offsets %v have a gap at %d", q, offs, o)
			}
		}
	}
	after := e.inv.Stats()
	scripts, calls := after.GroupScriptCalls-before.GroupScriptCalls, after.GroupedCalls-before.GroupedCalls
	if calls < 2*scripts {
		t.Errorf("%d calls on paused nodes ran as %d script calls: too few grouped to share a context", calls, scripts)
	}
	for i := range orders {
		id := fmt.Sprintf("hot-%d", i)
		if out, err := e.inv.Confirm(e.ctx, id); err != nil || out.Status != StatusConfirmed {
			t.Fatalf("confirm %s: %+v, %v", id, out, err)
		}
		e.verify(id, "confirmed")
	}
	e.stock()
	for rt, want := range map[string]int64{"a": orders, "b": orders / 2} {
		lvl, err := e.inv.GetStock(e.ctx, rt, "s")
		if err != nil {
			t.Fatal(err)
		}
		if lvl.Confirmed != want || lvl.Reserved != 0 {
			t.Errorf("route %s: %+v, want %d confirmed and none reserved", rt, lvl, want)
		}
	}
}
