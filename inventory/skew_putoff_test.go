package inventory

import (
	"testing"
	"time"
)

// A part put off because its order's home is out of reach is looked at
// again homeRetry later by its node's clock, which the pending index is
// read by. It was put off to the process's now + homeRetry: with the
// part's node 10 s ahead of the process, that was already past there, so
// every pass read it again at once (each waiting out the unreachable home
// again), holding up the parts of other orders behind it.
func TestPutOffIsByThePartNodesClock(t *testing.T) {
	t.Parallel()
	e := newSkewEnv(t)
	e.skew("n2", 10000)
	id := e.homedOn("putoff", "n1")
	home, err := e.inv.homeFor(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.inv.reserveGeneral(e.ctx, home, id, stagedItems(), "", time.Second, ""); err != nil {
		t.Fatal(err)
	}
	p := e.dueOf("n2", id)
	e.srvs[0].Kill() // the order's home: its decision is out of reach
	res, err := e.inv.ResolveExpired(e.ctx, p)
	if res != Postponed || err == nil {
		t.Fatalf("ResolveExpired with the home down = %v, %v; want postponed with the error", res, err)
	}
	n2, _ := e.r.Node("n2")
	due, err := e.inv.DueParts(e.ctx, n2, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range due {
		if d.PartID == p.PartID {
			t.Fatalf("the part put off for %v is due again at once on n2 (its clock 10 s ahead of the process's)", homeRetry)
		}
	}
	// and it is looked at again: due once homeRetry passed on n2
	if again := e.dueOf("n2", id); again.PartID != p.PartID {
		t.Fatalf("due again: part %s, want %s", again.PartID, p.PartID)
	}
}
