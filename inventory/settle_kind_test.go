package inventory

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestSettleRefusesAPartOfNoKind: a pending part settles as a stock part
// (kind s) or a quota part (kind q), or not at all: a part of any other
// kind, or none, is refused before any write (ErrCorrupt naming its key
// and its kind), and stays pending with its units reserved, for an
// operator to repair. Before, settle.lua took every kind but s for a
// quota part: a stock part whose record lost its kind was written
// confirmed by a Confirm, moving no counter, its units left in the stock
// hash's reserved for good (stranded).
func TestSettleRefusesAPartOfNoKind(t *testing.T) {
	for _, kind := range []string{"", "z"} {
		t.Run("kind="+kind, func(t *testing.T) {
			e := newStagedEnv(t)
			id := e.awayOrder("kindless")
			if _, err := e.inv.Reserve(e.ctx, id, []Item{{Route: "b", SKU: "s", Quantity: 5}}, "", time.Hour); err != nil {
				t.Fatal(err)
			}
			var pid string
			for k := range e.partsOf(id) {
				pid = k
			}
			c := e.clients["n2"]
			f := partFieldsOn(t, e.ctx, c, pid)
			delete(f, "kind")
			if kind != "" {
				f["kind"] = kind
			}
			if err := c.Del(e.ctx, partKey(pid)).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.HSet(e.ctx, partKey(pid), f).Err(); err != nil { // the hash layout of the releases before
				t.Fatal(err)
			}
			for _, a := range []Action{Confirm, Cancel} {
				res, err := e.inv.SettleNow(e.ctx, Settle{Node: "n2", Action: a, OrderID: id, PartIDs: []string{pid}})
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), partKey(pid)) ||
					!strings.Contains(err.Error(), `kind "`+kind+`"`) {
					t.Errorf("SettleNow(%s) of the part of kind %q = %v, %v; want ErrCorrupt naming its key and kind", a, kind, res, err)
				}
			}
			out, err := e.inv.Confirm(e.ctx, id)
			t.Logf("Confirm: %+v, %v", out, err)
			lvl, _ := e.inv.GetStock(e.ctx, "b", "s")
			state := partFieldsOn(t, e.ctx, c, pid)["state"]
			if state != "pending" || lvl.Reserved != 5 || lvl.Confirmed != 0 {
				t.Fatalf("part %s of kind %q after Confirm: %s, stock %+v; want pending, its 5 units reserved", pid, kind, state, lvl)
			}
		})
	}
}
