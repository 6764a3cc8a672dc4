package inventory

import "testing"

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
