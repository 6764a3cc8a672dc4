package inventory

import (
	"strings"
	"testing"
)

// TestAuditStockWrongTypeKey: AuditStock's doc: it "returns those
// [stock hashes] that do not add up ... It fails when the node is unknown
// or cannot be read". A stock key of the wrong type (a string where the
// hash should be) is corrupt data on a node that can be read (ErrCorrupt's
// doc: "a key of the wrong type: ... WRONGTYPE replies"); the audit must
// not answer it as the node being unavailable, and must still report the
// other hash that does not add up.
func TestAuditStockWrongTypeKey(t *testing.T) {
	e := newGroupEnv(t, 1)
	if _, err := e.inv.LoadStock(e.ctx, "a", "cold", 10, 0); err != nil {
		t.Fatal(err)
	}
	e.admin.HIncrBy(e.ctx, StockKey("a", "cold"), "confirmed", 1)
	if err := e.admin.Set(e.ctx, StockKey("a", "str"), "7", 0).Err(); err != nil {
		t.Fatal(err)
	}
	bad, err := e.inv.AuditStock(e.ctx, "n1")
	if err != nil {
		t.Fatalf("AuditStock = %v, %v; a wrong-type stock key on a readable node failed the audit (it answered ErrUnavailable, reporting nothing)", bad, err)
	}
	found := map[string]string{}
	for _, s := range bad {
		found[s.Key] = s.Err
	}
	if _, ok := found[StockKey("a", "cold")]; !ok {
		t.Errorf("AuditStock = %v; want a/cold reported", bad)
	}
	if why, ok := found[StockKey("a", "str")]; !ok || !strings.Contains(why, "not a hash") {
		t.Errorf("AuditStock = %v; want a/str reported as not a hash", bad)
	}
}
