package inventory

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A pending part's record is one string on its node, not a hash: on a
// real node MEMORY USAGE of a 1-item order's stock part stays at most
// 144 bytes (136 when written), its quota part's at most 176 (168). As a
// hash of 12 fields a stock part took 264 bytes (issue 25,
// internal/bench/memory.go). A stock part the local path takes (its home
// holds its stock) is inline: no record at all (inline.go).
func TestPartRecordPackedOnNode(t *testing.T) {
	e := newStagedEnv(t)
	one := []Item{{Route: "a", SKU: "s", Quantity: 1}}
	for i := range 8 {
		id := fmt.Sprintf("mem-%d", i)
		user := ""
		if i%2 == 1 {
			user = "user-1"
		}
		if _, err := e.inv.Reserve(e.ctx, id, one, user, time.Hour); err != nil {
			t.Fatal(err)
		}
		c := e.clients["n1"]
		keys, err := c.Keys(e.ctx, partKeyPrefix+id+"|*").Result()
		if err == nil && len(keys) == 0 && user == "" {
			// its home n1: the local path's inline part, no record of
			// its own (inline.go)
			in, ierr := InlineParts("n1", id, orderFieldsOn(t, e.ctx, c, id))
			if ierr != nil || len(in) != 1 {
				t.Fatalf("parts of %s on n1: no key; inline %v, %v; want one inline part", id, in, ierr)
			}
			continue
		}
		if err != nil || len(keys) == 0 {
			t.Fatalf("parts of %s on n1: %v, %v", id, keys, err)
		}
		for _, k := range keys {
			typ, err := c.Type(e.ctx, k).Result()
			if err != nil || typ != "string" {
				t.Errorf("part %s is a %q, %v; want a string", k, typ, err)
			}
			n, err := c.MemoryUsage(e.ctx, k).Result()
			partRecordBytes := int64(144)
			if strings.Contains(k, "|q|") {
				partRecordBytes = 176
			}
			if err != nil || n > partRecordBytes {
				v := c.Get(e.ctx, k).Val()
				t.Errorf("part %s (%q, %d bytes): MEMORY USAGE %d, %v; want at most %d", k, v, len(v), n, err, partRecordBytes)
			}
			if strings.Contains(k, "|q|") != (user != "") && !strings.HasSuffix(k, "|0") {
				t.Errorf("part %s of %s (user %q) is neither its stock part nor its quota part", k, id, user)
			}
		}
	}
}
