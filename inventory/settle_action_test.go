package inventory

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestSettleRefusesAnUnknownAction: a settle does what its action says or
// nothing. SettleNow refuses an Action that is neither Confirm nor Cancel
// (ErrInvalid, naming the action), and the settle script refuses any
// action word but confirm, cancel and abort before any write
// (SHARDIS_BADOP): the part stays pending. Before, SettleNow ran any
// string and settle.lua took every action but "confirm" for a cancel:
// Action("Confirm") gave the part's units back.
func TestSettleRefusesAnUnknownAction(t *testing.T) {
	e := newStagedEnv(t)
	id := e.awayOrder("act")
	if _, err := e.inv.Reserve(e.ctx, id, []Item{{Route: "b", SKU: "s", Quantity: 5}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	var pid string
	for k := range e.partsOf(id) {
		pid = k
	}
	for _, a := range []Action{"Confirm", "", actionAbort} {
		s := Settle{Node: "n2", Action: a, OrderID: id, PartIDs: []string{pid}}
		res, err := e.inv.SettleNow(e.ctx, s)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"`+string(a)+`"`) {
			t.Errorf("SettleNow(Action(%q)) = %v, %v; want ErrInvalid naming the action", a, res, err)
		}
	}
	// the script itself, as a caller that does not check would send it
	c := e.inv.settleCall(Settle{Node: "n2", Action: "Confirm", OrderID: id, PartIDs: []string{pid}})
	if v, err := e.inv.run(e.ctx, c.n, c.s, c.keys, c.args...); err == nil || !strings.Contains(err.Error(), "Confirm") {
		t.Errorf("settle script with action \"Confirm\" = %v, %v; want its refusal naming the action", v, err)
	}
	if st := e.partsOf(id)[pid]; st != "pending" {
		t.Fatalf("part %s is %s after settles of unknown actions; want pending", pid, st)
	}
	lvl, err := e.inv.GetStock(e.ctx, "b", "s")
	if err != nil {
		t.Fatal(err)
	}
	if lvl.Reserved != 5 {
		t.Errorf("stock after refused settles: %+v; want 5 reserved", lvl)
	}
}
