package inventory

import (
	"log/slog"
	"testing"
	"time"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/topology"
)

// TestPutBackFromAHomeFencedAtTheToken (found by a review): order st is reserved
// on n3; n3 leaves (st moves to n2, where it is confirmed) and comes back
// (step 3 moves st onto n3 again, marking n2's copy moved at the token).
// n3 then goes back to its older copy (st live there, reserved, epoch 1)
// and n1's topology record goes back too; n2, which lost nothing, is
// accepted while a peer was unreadable: fenced at the apply's own token
// and attempt (its records are the apply's: topology/doc.go). The apply
// brings n1, n2 and n3 forward. n2 still holds st's copy marked at the
// token, the order's newest surviving record, so st must be put back on
// n3 confirmed. Before the fix planPutBacks passed n2 over (markedHome
// compared the fenced token with c.Token), so st's older copy on n3 was
// retired as stale: st had no live record anywhere, and a Cancel undid
// its acknowledged Confirm.
func TestPutBackFromAHomeFencedAtTheToken(t *testing.T) {
	t.Parallel()
	e, three, two, _ := retireWorld(t)
	ctx := e.ctx
	id := movedN3ToN2(t, three, two)
	quiet := slog.New(slog.DiscardHandler)
	apply := stableApplier(t, ctx)
	_, stale := reservedCopy(t, e, three, id)
	n1, n2, n3 := e.clients["n1"], e.clients["n2"], e.clients["n3"]
	old1, old3 := copyEpoch(t, n1), copyEpoch(t, n3)
	if rep := apply(two, three); rep.OrdersMoved != 1 {
		t.Fatalf("removal of n3: %+v, want 1 order moved", rep)
	}
	if out, err := openInv(t, two, Options{}).Confirm(ctx, id); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm at the 2-node topology: %+v, %v", out, err)
	}
	if rep := apply(three, two); rep.OrdersMoved != 1 || rep.ToEpoch != 3 {
		t.Fatalf("n3 back: %+v, want 1 order moved, epoch 3", rep)
	}
	// n3 goes back to the copy: epoch 1, st live and reserved
	old3.restore(t, n3)
	if err := n3.RestoreReplace(ctx, orderKey(id), 0, stale).Err(); err != nil {
		t.Fatal(err)
	}
	old1.restore(t, n1)
	// n2 lost nothing, but is accepted while a peer is unreadable:
	// fenced at the token (as TestForwardOfAFenceAtTheTokenRetiresNothing)
	tok := n2.HGet(ctx, node.StampKey, "epoch").Val()
	if err := n2.HSet(ctx, node.StampKey, "epoch", node.FencePrefix+tok).Err(); err != nil {
		t.Fatal(err)
	}
	if f := orderFieldsOn(t, ctx, n2, id); f["moved"] != tok || f["status"] != string(OrderConfirmed) {
		t.Fatalf("order %s on n2 before the forward: %v; want the confirmed copy marked at %s", id, f, tok)
	}
	rep, err := ApplyTopology(ctx, ApplyOptions{To: three, Wait: 5 * time.Second, Logger: quiet})
	if err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("the forward = %+v, %v", rep, err)
	}
	t.Logf("forward: %+v", rep)
	if f := orderFieldsOn(t, ctx, n3, id); f["status"] != string(OrderConfirmed) || f["moved"] != "" {
		t.Errorf("order %s on n3, its home: %v; want the confirmed record put back, live", id, f)
	}
	if out, err := openInv(t, three, Options{}).Cancel(ctx, id); err == nil {
		t.Errorf("Cancel of the confirmed order %s after the forward = %+v; want ErrConfirmed", id, out)
	} else {
		t.Logf("Cancel: %v", err)
	}
}
