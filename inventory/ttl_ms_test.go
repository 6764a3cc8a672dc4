package inventory

import (
	"testing"
	"time"
)

// The hold applied is whole milliseconds, at least one, and the
// reservation says so: a ttl of 999µs was held 0ms (its deadline its
// start) while Reservation.TTL reported 999µs; 1.5ms was held 1ms and
// reported 1.5ms.
func TestReserveTTLIsWholeMilliseconds(t *testing.T) {
	e := newStagedEnv(t)
	if _, err := e.inv.LoadStock(e.ctx, "a", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct{ ask, want time.Duration }{
		{999 * time.Microsecond, time.Millisecond},
		{1500 * time.Microsecond, time.Millisecond},
		{2 * time.Second, 2 * time.Second},
	} {
		res, err := e.inv.Reserve(e.ctx, "ttl-"+string(rune('a'+i)), []Item{{Route: "a", SKU: "s", Quantity: 1}}, "", c.ask)
		if err != nil {
			t.Fatal(err)
		}
		if res.TTL != c.want {
			t.Errorf("Reserve with ttl %v: TTL %v, want %v (the hold applied)", c.ask, res.TTL, c.want)
		}
	}
}
