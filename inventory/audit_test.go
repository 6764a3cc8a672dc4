package inventory

import (
	"strings"
	"testing"
)

// AuditStock finds, on a real node, the stock hashes whose counters do
// not add up, and none while every change came from the scripts: a
// reserve, a confirm and a cancel keep available + reserved + confirmed
// == loaded; half a settle (its confirmed HINCRBY alone, as a torn AOF
// replays it: SECURITY.md, Persistence), a negative field or one that is
// not an integer do not.
func TestAuditStockFindsHashesThatDoNotAddUp(t *testing.T) {
	t.Parallel()
	e := newGroupEnv(t, 1)
	for _, sku := range []string{"hot", "cold", "odd", "neg"} {
		if _, err := e.inv.LoadStock(e.ctx, "a", sku, 10, 0); err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range []string{"o1", "o2"} {
		if _, err := e.inv.Reserve(e.ctx, id, []Item{{Route: "a", SKU: "hot", Quantity: 2}}, "", 0); err != nil {
			t.Fatal(err)
		}
		decide := e.inv.Confirm
		if i == 1 {
			decide = e.inv.Cancel
		}
		if _, err := decide(e.ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.inv.Reserve(e.ctx, "o3", []Item{{Route: "a", SKU: "hot", Quantity: 1}}, "", 0); err != nil {
		t.Fatal(err)
	}
	bad, err := e.inv.AuditStock(e.ctx, "n1")
	if err != nil || len(bad) != 0 {
		t.Fatalf("AuditStock after scripts only = %v, %v; want none", bad, err)
	}

	e.admin.HIncrBy(e.ctx, StockKey("a", "cold"), "confirmed", 1)
	e.admin.HSet(e.ctx, StockKey("a", "odd"), "available", "x")
	e.admin.HSet(e.ctx, StockKey("a", "neg"), "available", "11", "reserved", "-1")
	bad, err = e.inv.AuditStock(e.ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range bad {
		got[s.Key] = s.String()
	}
	want := map[string]string{
		StockKey("a", "cold"): "inv:stock:a:cold on n1: available 10 + reserved 0 + confirmed 1 = 11, loaded 10",
		StockKey("a", "odd"):  `inv:stock:a:odd on n1: available is "x", not an integer`,
		StockKey("a", "neg"):  "inv:stock:a:neg on n1: available 11 + reserved -1 + confirmed 0 = 10, loaded 10",
	}
	if len(got) != len(want) {
		t.Errorf("AuditStock = %v; want the three hashes changed by hand", bad)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("AuditStock of %s = %q; want %q", k, got[k], w)
		}
	}
	if strings.Contains(strings.Join(mapValues(got), "\n"), "hot") {
		t.Errorf("AuditStock named a/hot, which only scripts changed: %v", bad)
	}
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
