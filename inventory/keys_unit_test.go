package inventory

import (
	"strconv"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestParseQuotaKey(t *testing.T) {
	for _, c := range []struct{ route, sku, user string }{
		{"r", "X", ":9"}, {"r", "X:", "9"}, {"clothes", "sku:1:2", "u:1"}, {"r", "", "u"},
	} {
		k := quotaKey(c.route, c.sku, c.user)
		sku, user, ok := parseQuotaKey(c.route, k)
		if !ok || sku != c.sku || user != c.user {
			t.Errorf("parseQuotaKey(%q) = %q, %q, %v; want %q, %q", k, sku, user, ok, c.sku, c.user)
		}
	}
	for _, k := range []string{"inv:quota:r:", "inv:quota:r:5:abc:u", "inv:quota:r:x:a:b", "inv:quota:other:1:a:b", "inv:quota:r:-1:a:b"} {
		if _, _, ok := parseQuotaKey("r", k); ok {
			t.Errorf("parseQuotaKey(%q) accepted a malformed key", k)
		}
	}
}

// TestStoredHashesStay pins what records and key placement keep across
// releases: an order's digest (stored in its record, compared when the
// order id comes back) is xxhash of the user id, then "\x00" route "\x00"
// sku "\x00" quantity per item, in hex; a SKU's redo queue is xxhash of
// route ":" sku modulo the queues, named by RedoLogKey.
func TestStoredHashesStay(t *testing.T) {
	long := strings.Repeat("r", 40)
	for _, c := range []struct {
		items []Item
		user  string
	}{
		{[]Item{{Route: "a", SKU: "s", Quantity: 1}}, ""},
		{[]Item{{Route: "a", SKU: "s", Quantity: 1}, {Route: long, SKU: long, Quantity: MaxQuantity}}, "u:1"},
		{nil, "u"},
	} {
		want := c.user
		for _, it := range c.items {
			want += "\x00" + it.Route + "\x00" + it.SKU + "\x00" + strconv.FormatInt(it.Quantity, 10)
		}
		if got, want := digestOf(c.items, c.user), strconv.FormatUint(xxhash.Sum64String(want), 16); got != want {
			t.Errorf("digestOf(%v, %q) = %s, want %s", c.items, c.user, got, want)
		}
	}
	inv := &Inventory{}
	for _, queues := range []int{1, 50, 1024} {
		inv.cfg.RedoQueues = queues
		for _, rs := range [][2]string{{"a", "s"}, {long, long}, {"r", "sku:1"}} {
			want := redoLogKeyPrefix + strconv.Itoa(int(xxhash.Sum64String(rs[0]+":"+rs[1])%uint64(queues)))
			if got := inv.redoQueue(rs[0], rs[1]); got != want {
				t.Errorf("redoQueue(%q, %q) over %d queues = %s, want %s", rs[0], rs[1], queues, got, want)
			}
		}
	}
	if got := RedoLogKey(2000); got != redoLogKeyPrefix+"2000" {
		t.Errorf("RedoLogKey(2000) = %s", got)
	}
}
