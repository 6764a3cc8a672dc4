package inventory

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/topology"
)

// TestTakeBackLeavesNoTransferRecord: route c (10 units of c/s, user u's
// quota count of 2) moves off n3 onto n2 at epoch 2. n3 goes back to a
// copy from before the apply and is accepted (fenced); the move forward
// dies in its take back (crash point "take-back"), n3 still behind.
// Then n1 and n2 go back to their copies from before the apply too, and
// are accepted: every node is at epoch 1, whose apply brings the fenced
// ones forward. Instances at epoch 1 sell on n3 (route c's home there):
// u buys 3 more (limit 5) and 8 units are sold in all. The same topology
// applied again runs at the same token (epoch 2), as another attempt,
// and its step 3 moves c's stock and u's count off n3 again, under the
// same transfer ids. Before, the take back's out had left its record on
// n3 (what the copy held: 10 available, u's count 2), which that step
// 3's out read as its own: n2 got 10 units available where 2 were left
// (8 sold twice), and u's count 2 where it was 5 (u could buy 3 past the
// limit), the rest stranded on n3. Now the take back is one script
// (xferTakeBackScript): cut short, it wrote nothing.
func TestTakeBackLeavesNoTransferRecord(t *testing.T) {
	t.Parallel()
	for _, crash := range []string{"stock", "quota"} {
		t.Run(crash, func(t *testing.T) { takeBackVoid(t, crash == "quota") })
	}
}

// takeBackVoid is TestTakeBackLeavesNoTransferRecord's scenario; quota
// gives u a count on n3 (then the take back dies at u's counter, before
// the stock hash's).
func takeBackVoid(t *testing.T, quota bool) {
	ctx, srvs, before, after := routeCOffN3(t)
	n1, n2, n3 := srvs[0].Client(t), srvs[1].Client(t), srvs[2].Client(t)
	quiet := slog.New(slog.DiscardHandler)
	apply := func(to *config.Config, f Faults) (topology.Report, error) {
		opts := ApplyOptions{To: to, Wait: 5 * time.Second, Logger: quiet}
		if f != nil {
			opts.Faults = f
		}
		return ApplyTopology(ctx, opts)
	}
	inv := openInv(t, before, Options{})
	if _, err := inv.LoadStock(ctx, "c", "s", 10, 5); err != nil {
		t.Fatal(err)
	}
	buy := func(inv *Inventory, id, user string, qty int64) error {
		t.Helper()
		if _, err := inv.Reserve(ctx, id, []Item{{Route: "c", SKU: "s", Quantity: qty}}, user, time.Hour); err != nil {
			return err
		}
		out, err := inv.Confirm(ctx, id)
		if err == nil && out.Status != StatusConfirmed {
			t.Fatalf("Confirm %s = %+v", id, out)
		}
		return err
	}
	if quota {
		if err := buy(inv, "o-u1", "u", 2); err != nil {
			t.Fatal(err)
		}
	}
	inv.Close()
	old1, old2, old3 := takeCopy(t, n1), takeCopy(t, n2), takeCopy(t, n3)
	if rep, err := apply(after, nil); err != nil || rep.Phase != topology.PhaseStable || rep.StockMoved != 1 {
		t.Fatalf("moving route c off n3 = %+v, %v; want stable, 1 stock hash moved", rep, err)
	}
	old3.restore(t, n3)
	if !acceptNode(t, ctx, after, n3, "n3") {
		t.Fatal("setup: n3 accepted unfenced behind its peers")
	}
	if _, err := apply(after, crashAtPoint("take-back")); !errors.Is(err, ErrCrashed) {
		t.Fatalf("the forward crashed at take-back = %v, want ErrCrashed", err)
	}
	// every node goes back to epoch 1
	old1.restore(t, n1)
	acceptNode(t, ctx, after, n1, "n1")
	old2.restore(t, n2)
	acceptNode(t, ctx, after, n2, "n2")
	if rep, err := apply(before, nil); err != nil || rep.ToEpoch != 1 {
		t.Fatalf("applying epoch 1's topology once every node went back = %+v, %v; want epoch 1", rep, err)
	}
	// the invariant the rerun rule relies on: a node below an epoch holds
	// no transfer record and no applied marker of that epoch (n3's take
	// back wrote its counters whole or not at all, markers only at the
	// epoch's token)
	for i, c := range []*redis.Client{n1, n2, n3} {
		for _, pat := range []string{xferKey("2|*"), xferMarkerKey("2|*")} {
			if keys := c.Keys(ctx, pat).Val(); len(keys) != 0 {
				t.Errorf("n%d at epoch 1 holds transfer keys of epoch 2: %v", i+1, keys)
			}
		}
	}
	one := openInv(t, before, Options{})
	buys := map[string]int64{"v": 5, "w": 3} // 8 sold in all
	if quota {
		buys = map[string]int64{"u": 3, "v": 3} // with u's 2 before the apply
	}
	for user, qty := range buys {
		if err := buy(one, "o-"+user+"-1", user, qty); err != nil {
			t.Fatalf("%s buys %d at epoch 1: %v", user, qty, err)
		}
	}
	one.Close()
	rep, err := apply(after, nil)
	if err != nil || rep.ToEpoch != 2 || rep.Phase != topology.PhaseStable {
		t.Fatalf("moving route c off n3 again = %+v, %v; want epoch 2, stable", rep, err)
	}
	two := openInv(t, after, Options{})
	lvl, err := two.GetStock(ctx, "c", "s")
	if err != nil || lvl.Available != 2 || lvl.Confirmed != 8 || lvl.Loaded != 10 {
		t.Errorf("GetStock(c, s) at epoch 2 = %+v, %v; want 2 available, 8 confirmed, 10 loaded", lvl, err)
	}
	if _, err := two.Reserve(ctx, "o-x", []Item{{Route: "c", SKU: "s", Quantity: 3}}, "x", time.Hour); err == nil {
		t.Error("3 units reserved at epoch 2 where 2 were left: oversold")
	}
	if f := n3.HGetAll(ctx, stockKey("c", "s")).Val(); (f["available"] != "" && f["available"] != "0") || (f["confirmed"] != "" && f["confirmed"] != "0") || (f["loaded"] != "" && f["loaded"] != "0") {
		t.Errorf("n3 still holds units of c/s (stranded there): %v", f)
	}
	if n := n3.Exists(ctx, quotaKey("c", "s", "u")).Val(); n != 0 {
		t.Errorf("n3 still holds u's count: %s", n3.Get(ctx, quotaKey("c", "s", "u")).Val())
	}
	if quota {
		if got, err := n2.Get(ctx, quotaKey("c", "s", "u")).Int64(); err != nil && err != redis.Nil || got != 5 {
			t.Errorf("u's count on n2, its home = %d, %v; want 5", got, err)
		}
		if _, err := openInv(t, after, Options{}).Reserve(ctx, "o-u3", []Item{{Route: "c", SKU: "s", Quantity: 1}}, "u", time.Hour); err == nil {
			t.Error("u bought a 6th unit past the limit of 5")
		}
	}
}

// TestTakeBackDropsStep3sRecord: n3's copy is taken during the apply
// moving route c off it, between its transfer's out and in (step 3's
// record of c/s on n3, c's 10 units still there); n3 goes back to it and
// is accepted at the token. The move forward's take back finds that
// record: it subtracts what n3 holds (the 10 units, which n2 holds) and
// drops the record, in one script, so the units are counted once and no
// record of the epoch stays on n3.
func TestTakeBackDropsStep3sRecord(t *testing.T) {
	t.Parallel()
	ctx, srvs, before, after := routeCOffN3(t)
	n2, n3 := srvs[1].Client(t), srvs[2].Client(t)
	inv := openInv(t, before, Options{})
	if _, err := inv.LoadStock(ctx, "c", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	inv.Close()
	quiet := slog.New(slog.DiscardHandler)
	f := &copyBeforeScript{t: t, node: "n2", script: xferInScript.name, c: n3}
	rep, err := ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet, Faults: f})
	if err != nil || rep.Phase != topology.PhaseStable || rep.StockMoved != 1 {
		t.Fatalf("moving route c off n3 = %+v, %v; want stable, 1 stock hash moved", rep, err)
	}
	id := xferID(rep.ToEpoch, xferStock, "n3", stockKey("c", "s"))
	f.copy.restore(t, n3)
	if fenced := acceptNode(t, ctx, after, n3, "n3"); fenced || n3.Exists(ctx, xferKey(id)).Val() != 1 {
		t.Fatalf("setup: n3 fenced %v, or without step 3's record of %s", fenced, id)
	}
	rep, err = ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet})
	if err != nil || rep.Phase != topology.PhaseStable || rep.TakenBack != 1 {
		t.Fatalf("the apply after n3 went back = %+v, %v; want stable, 1 taken back", rep, err)
	}
	l2, _ := n2.HGet(ctx, stockKey("c", "s"), "loaded").Int64()
	l3, _ := n3.HGet(ctx, stockKey("c", "s"), "loaded").Int64()
	if l2 != 10 || l3 != 0 || n3.Exists(ctx, xferKey(id)).Val() != 0 {
		t.Errorf("after the take back: n2 holds %d loaded, n3 %d, n3's record of %s %d; want 10, 0, none", l2, l3, id, n3.Exists(ctx, xferKey(id)).Val())
	}
}
