package inventory

import (
	"testing"
	"time"
)

// TestScriptsSentBySourceAfterFlush empties the node's script cache
// between calls: each call's EVALSHA then meets NOSCRIPT, nothing ran, and
// the call is sent again with the script's source (luaScript.cmd), which
// also puts the script back in the cache. Run for a grouped script alone
// and in groups (the local reserve), and for a script sent without a
// group (the stock load).
func TestScriptsSentBySourceAfterFlush(t *testing.T) {
	for _, groupCommit := range []int{1, 32} {
		e := newGroupEnv(t, groupCommit)
		inv, c, ctx := e.inv, e.admin, e.ctx
		items := []Item{{Route: "a", SKU: "s", Quantity: 1}}
		for i := range 3 {
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := inv.LoadStock(ctx, "a", "s", 10, 0); err != nil {
				t.Fatalf("group_commit %d, round %d: LoadStock after SCRIPT FLUSH: %v", groupCommit, i, err)
			}
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			id := "flush-" + string(rune('a'+i))
			res, err := inv.Reserve(ctx, id, items, "", time.Hour)
			if err != nil {
				t.Fatalf("group_commit %d, round %d: Reserve after SCRIPT FLUSH: %v", groupCommit, i, err)
			}
			if len(res.Receipts) != 1 || res.Receipts[0].Quantity != 1 {
				t.Fatalf("group_commit %d: reservation %+v, want one part of 1", groupCommit, res)
			}
			ok, err := c.ScriptExists(ctx, localScript.hash()).Result()
			if err != nil || !ok[0] {
				t.Fatalf("group_commit %d: the local reserve script is not cached after its call (%v, %v)", groupCommit, ok, err)
			}
		}
		lvl, err := inv.GetStock(ctx, "a", "s")
		if err != nil || lvl.Loaded != 30 || lvl.Available != 27 || lvl.Reserved != 3 {
			t.Fatalf("group_commit %d: stock %+v (%v), want 30 loaded, 27 available and 3 reserved", groupCommit, lvl, err)
		}
	}
}
