package inventory

import (
	"errors"
	"strings"
	"testing"

	"github.com/shardis/shardis/topology"
)

// A lost quota part's settle is refused while a topology change moves
// quota counts. The interleaving, on real nodes: user u (limit 4 of
// r/lim) holds 2 confirmed and 2 in order L's quota part on P (u's quota
// node, count 4); L's part record is lost on P, L is cancelled (the
// settle answers lost) and the part is set aside. `topology apply` moves
// u's quota home to n4: its transfer out records the 4 units of P's
// count, then the apply dies (as a process between two scripts). The
// operator now runs SettleStuckLost cancel of L's part on P; the apply
// is run again, adds the recorded 4 to n4 and subtracts them on P.
//
// Before, the settle answered done (P's count 4 holds 2), taking P's
// count to 2, and the apply's rerun added the 4 it had recorded on n4:
// n4 counted 4 for u, who held 2, for good (u refused an order of 1 with
// limit 4 less 2 held), the part unlisted, nothing left to report it.
// The transfer's out is a snapshot of a count no pending part was
// thought to move (a lost record names no count, so the apply cannot wait
// for it), and this settle was the one write of such a count. Now the
// settle is refused while the topology is migrating, nothing changed,
// and once the apply has ended its refusal names the count moved off
// (the units the operator takes off by hand on u's new quota node).
func TestSettleStuckLostOfAQuotaPartIsRefusedWhileItsCountMoves(t *testing.T) {
	t.Parallel() // its own nodes
	e := newMigrateEnv(t)
	old := e.open(e.old)
	if _, err := old.LoadStock(e.ctx, "r", "lim", 10, 4); err != nil {
		t.Fatal(err)
	}
	order := "lost-" + e.user
	if _, err := old.Reserve(e.ctx, order, []Item{{Route: "r", SKU: "lim", Quantity: 2}}, e.user, stagedTTL); err != nil {
		t.Fatal(err)
	}
	p := e.clients[e.userPrev]
	counter := quotaKey("r", "lim", e.user)
	if v := p.Get(e.ctx, counter).Val(); v != "4" {
		t.Fatalf("u's count on %s after the reserve = %q; want 4", e.userPrev, v)
	}
	id := ""
	members, err := p.ZRange(e.ctx, PendingKey, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if strings.HasPrefix(m, order+"|") && strings.HasSuffix(m, "|q|r|lim") {
			id = m
		}
	}
	if id == "" {
		t.Fatalf("no quota part of %s pending on %s: %v", order, e.userPrev, members)
	}
	if err := p.Del(e.ctx, partKey(id)).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Cancel(e.ctx, order); err != nil {
		t.Fatal(err)
	}
	if k, err := old.SetAside(e.ctx, PendingPart{Node: e.userPrev, PartID: id}, "lost", DefaultStuckRetry, DefaultStuckRetryMax); err != nil || k != 1 {
		t.Fatalf("SetAside of the lost quota part = %d, %v", k, err)
	}
	if _, err := e.applyWith(crashAtPoint("xfer-out")); !errors.Is(err, errCrashed) {
		t.Fatalf("apply with a crash at xfer-out = %v, want the injected crash", err)
	}
	u := StuckUnits{Route: "r", SKU: "lim", Quantity: 2, User: e.user}
	inv := e.open(e.new)
	if res, err := inv.SettleStuckLost(e.ctx, e.userPrev, id, Cancel, u); !errors.Is(err, ErrTopology) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("SettleStuckLost while the apply moves u's count = %q, %v; want refused (ErrUnavailable, ErrTopology)", res, err)
	}
	if v := p.Get(e.ctx, counter).Val(); v != "4" {
		t.Errorf("u's count on %s after the refused settle = %q; want 4, unchanged", e.userPrev, v)
	}
	if rep, err := e.apply(); err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("the crashed apply run again = %+v, %v; want stable", rep, err)
	}
	// the lost part's 2 moved with the count, the part still listed on P
	if v := e.clients["n4"].Get(e.ctx, counter).Val(); v != "4" {
		t.Errorf("u's count on n4 after the apply = %q; want 4 (2 confirmed, 2 of the lost part)", v)
	}
	if _, err := p.ZScore(e.ctx, keyStuck, id).Result(); err != nil {
		t.Errorf("the lost quota part is no longer set aside on %s (%v); want it listed until the operator settles it", e.userPrev, err)
	}
	if _, err := e.open(e.new).SettleStuckLost(e.ctx, e.userPrev, id, Cancel, u); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), counter) {
		t.Errorf("SettleStuckLost once the count moved = %v; want ErrInvalid naming %s", err, counter)
	}
}
