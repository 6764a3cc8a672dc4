package inventory

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSettleNamesAPartOnce: a part is settled at most once, however often
// a settle names it. SettleNow refuses a Settle naming one part id twice
// (ErrInvalid, naming the id) and changes nothing; the settle script
// given the same part twice settles it once, the repeat answering
// "already". Before, settle.lua read every record before writing any, so
// both entries read "pending" and the part's 5 units were given back
// twice (available 1005, reserved -5).
func TestSettleNamesAPartOnce(t *testing.T) {
	e := newStagedEnv(t)
	id := e.awayOrder("dup")
	if _, err := e.inv.Reserve(e.ctx, id, []Item{{Route: "b", SKU: "s", Quantity: 5}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	parts := e.partsOf(id)
	if len(parts) != 1 {
		t.Fatalf("parts on n2: %v", parts)
	}
	var pid string
	for k := range parts {
		pid = k
	}
	s := Settle{Node: "n2", Action: Cancel, OrderID: id, PartIDs: []string{pid, pid}}
	res, err := e.inv.SettleNow(e.ctx, s)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), pid) {
		t.Fatalf("SettleNow naming %s twice = %v, %v; want ErrInvalid naming the part", pid, res, err)
	}
	if st := e.partsOf(id)[pid]; st != "pending" {
		t.Fatalf("part %s is %s after a refused settle; want pending", pid, st)
	}
	// the script itself, as a caller that does not check would send it
	c := e.inv.settleCall(s)
	v, err := e.inv.run(e.ctx, c.n, c.s, c.keys, c.args...)
	if err != nil {
		t.Fatal(err)
	}
	got, err := asStrings(c.n, settleScript, v)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"done", "already"}; !slices.Equal(got, want) {
		t.Errorf("settle naming the part twice answered %v; want %v", got, want)
	}
	lvl, err := e.inv.GetStock(e.ctx, "b", "s")
	if err != nil {
		t.Fatal(err)
	}
	if lvl.Available != stagedStock || lvl.Reserved != 0 {
		t.Fatalf("after one part of 5 units cancelled: %+v, want available %d reserved 0", lvl, stagedStock)
	}
}
