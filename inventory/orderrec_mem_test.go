package inventory

import (
	"fmt"
	"testing"
	"time"
)

// A pending order's record is one string on its home node, not a hash:
// MEMORY USAGE of a 1-item order's record stays at most 152 bytes when
// reserved by the one-script path (local.go), 184 by the staged path; an
// order with a user (a quota part too) at most 184 and 232. As a hash a
// 1-item order's record took 232 (local) and 296 bytes (staged; issue
// 25, internal/bench/memory.go).
func TestOrderRecordPackedOnNode(t *testing.T) {
	max := map[[2]bool]int64{ // by (local, with a user)
		{true, false}: 152, {true, true}: 184, {false, false}: 184, {false, true}: 232}
	e := newStagedEnv(t)
	one := []Item{{Route: "a", SKU: "s", Quantity: 1}}
	local, staged := 0, 0
	for i := 0; local < 4 || staged < 2; i++ {
		if i > 60 {
			t.Fatalf("no 4 local and 2 staged orders of 60 (%d, %d)", local, staged)
		}
		id := fmt.Sprintf("mem-%d", i)
		user := ""
		if i%2 == 1 {
			user = "user-1"
		}
		if _, err := e.inv.Reserve(e.ctx, id, one, user, time.Hour); err != nil {
			t.Fatal(err)
		}
		home, _ := e.inv.orderHome(e.inv.topo.cur.Load(), id)
		c := e.clients[home.Name()]
		isLocal := home.Name() == "n1"
		want := max[[2]bool{isLocal, user != ""}]
		if isLocal {
			local++
		} else {
			staged++
		}
		if typ, err := c.Type(e.ctx, orderKey(id)).Result(); err != nil || typ != "string" {
			t.Errorf("order %s on %s is a %q, %v; want a string", id, home.Name(), typ, err)
		}
		n, err := c.MemoryUsage(e.ctx, orderKey(id)).Result()
		v := c.Get(e.ctx, orderKey(id)).Val()
		if err != nil || n > want {
			t.Errorf("order %s on %s (%q, %d bytes): MEMORY USAGE %d, %v; want at most %d", id, home.Name(), v, len(v), n, err, want)
		}
	}
}
