package inventory

import (
	"testing"
)

// TestResolveExpiredSetsAsideAStagedOrderItCannotDecide: a due part whose
// order is still staging is resolved by deciding the order first, which
// probes the order's other promised parts. When a probe meets data to
// repair (a part key of the wrong type on another node: ErrCorrupt),
// ResolveExpired must return that error without postponing the part, so
// the reconciler sets the part aside with the reason (ResolveExpired's
// doc: postponed only "for a reason other than data to repair"). Before,
// the part was postponed by a few seconds with the error, which the
// reconciler counts as moved out of the way and never sets aside: the
// part came due again every few seconds, for good, listed nowhere.
func TestResolveExpiredSetsAsideAStagedOrderItCannotDecide(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t) // routes a, b, c on n1, n2, n3
	id := e.homedOn("unsettleable", "n1")
	if _, err := e.reserveAt("staged:stage-only", id); err == nil {
		t.Fatal("Reserve stopped after its stage answered success")
	}
	p := e.dueOf("n1", id) // the home's part, taken by the stage
	// The b part the stage promised on n2, never taken: its key holds a
	// list, so the probe that decides the order fails on WRONGTYPE.
	if err := e.clients["n2"].RPush(e.ctx, partKey(stockPartID(id, p.Token, 1)), "x").Err(); err != nil {
		t.Fatal(err)
	}
	res, err := e.inv.ResolveExpired(e.ctx, p)
	if !Unsettleable(err) || res == Postponed {
		t.Fatalf("ResolveExpired = %q, %v; want an Unsettleable error and the part not postponed (to be set aside)", res, err)
	}
	n1, _ := e.r.Node("n1")
	tries, err := e.inv.SetAside(e.ctx, p, err.Error(), stagedTTL, stagedTTL)
	if err != nil || tries != 1 {
		t.Fatalf("SetAside = %d, %v; want the part set aside once", tries, err)
	}
	stuck, err := e.inv.StuckParts(e.ctx, n1.Name(), 10)
	if err != nil || len(stuck) != 1 || stuck[0].PartID != p.PartID {
		t.Fatalf("StuckParts(n1) = %+v, %v; want the part %s", stuck, err, p.PartID)
	}
}
