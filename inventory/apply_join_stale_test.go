package inventory

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/topology"
)

// TestJoinRefusesStaleCounters: route c (10 units of c/s, user u's quota
// count of 2) moves off n3 onto n2, which then holds them. n3 goes back to
// a copy of its data from before the move, so it holds c's 10 units and
// u's count again, counted on n2 too, and the move forward leaves them
// there (with a warning: no instance reads them while n3 is no member of
// c). An apply that gives n3 route c again would serve those 10 units on
// top of n2's 8 (18 sellable where 8 are left) and add u's count on n2
// to n3's (u's quota home in c is n3 then). Every case must refuse that
// apply before it writes anything (topology.ErrInvalid naming n3, c and
// the keys); once the operator deletes the stale keys, as the refusal
// says, the apply goes through, each unit and u's count counted once.
//
//   - marker-gone: the transfers' markers on n2 expired (xferMarkerTTL)
//     before n3 went back: the take back cannot tell where the units are;
//   - earlier-change: another apply (route e added) came after the move,
//     so the take back, which reads only the last change's transfers,
//     does not look at c;
//   - mid-apply: n3 goes back once the apply that gives it c again has
//     bumped n1 and died: the rerun resumes it and bumps n3 (no check of
//     a new epoch runs). There the quota counter is only logged, not
//     refused: counted twice it makes u's limit stricter, never an
//     oversell, and the refusal would leave n3 behind mid-apply.
func TestJoinRefusesStaleCounters(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"marker-gone", "earlier-change", "mid-apply"} {
		t.Run(c, func(t *testing.T) { joinWithStaleCounters(t, c) })
	}
}

func joinWithStaleCounters(t *testing.T, scenario string) {
	srvs := redistest.StartN(t, 3, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	addrs := map[string]string{"n1": srvs[0].Addr(), "n2": srvs[1].Addr(), "n3": srvs[2].Addr()}
	routes := func(c []string, withE bool) *config.Config {
		rs := map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": c, "d": {"n3"}}
		if withE {
			rs["e"] = []string{"n1"}
		}
		return leaveConfig(t, addrs, rs)
	}
	withE := scenario == "earlier-change"
	before, after, rejoin := routes([]string{"n3"}, false), routes([]string{"n2"}, false), routes([]string{"n2", "n3"}, withE)
	n2, n3 := srvs[1].Client(t), srvs[2].Client(t)
	user := userHomedOn(t, "n3", "n2", "n3")
	loadAndBuyTwo(t, ctx, openInv(t, before, Options{}), user)
	old3 := takeCopy(t, n3)
	quiet := slog.New(slog.DiscardHandler)
	apply := func(to *config.Config, f Faults) (topology.Report, error) {
		opts := ApplyOptions{To: to, Wait: 5 * time.Second, Logger: quiet}
		if f != nil {
			opts.Faults = f
		}
		return ApplyTopology(ctx, opts)
	}
	if rep, err := apply(after, nil); err != nil || rep.Phase != topology.PhaseStable || rep.StockMoved != 1 || rep.QuotasMoved != 1 {
		t.Fatalf("moving route c off n3 = %+v, %v; want stable, 1 stock hash and 1 quota counter moved", rep, err)
	}
	last := after
	switch scenario {
	case "marker-gone":
		keys := n2.Keys(ctx, xferMarkerKeyPrefix+"*").Val()
		if len(keys) != 2 || n2.Del(ctx, keys...).Err() != nil {
			t.Fatalf("the transfers' markers on n2: %v, want 2, deleted", keys)
		}
	case "earlier-change":
		last = routes([]string{"n2"}, true)
		if rep, err := apply(last, nil); err != nil || rep.Phase != topology.PhaseStable {
			t.Fatalf("adding route e = %+v, %v", rep, err)
		}
	case "mid-apply":
		if _, err := apply(rejoin, crashAtPoint("bump")); !errors.Is(err, ErrCrashed) {
			t.Fatalf("giving n3 route c again, crashed after the first bump = %v, want ErrCrashed", err)
		}
	}
	old3.restore(t, n3) // c's 10 units and u's count of 2 again
	acceptNode(t, ctx, last, n3, "n3")
	if scenario != "mid-apply" {
		rep, err := apply(last, nil)
		if err != nil || len(rep.Forward) != 1 || rep.TakenBack != 0 {
			t.Fatalf("bringing n3 forward = %+v, %v; want n3 forward, nothing taken back", rep, err)
		}
		// the stock hash it leaves is named in the report, and why
		why := map[string]string{"marker-gone": "no marker", "earlier-change": "moved off by an earlier apply"}[scenario]
		want := topology.LeftCounter{Node: "n3", Key: stockKey("c", "s"), Why: why}
		if !slices.Contains(rep.LeftBehind, want) {
			t.Errorf("bringing n3 forward left behind %+v; want %+v among them", rep.LeftBehind, want)
		}
	}
	stale := []string{stockKey("c", "s"), quotaKey("c", "s", user)}
	for _, k := range stale {
		if n3.Exists(ctx, k).Val() != 1 {
			t.Fatalf("setup: n3 does not hold %s", k)
		}
	}
	_, err := apply(rejoin, nil)
	// a stale quota counter refuses a new epoch, not a resume (mid-apply:
	// logged, counted twice at worst, a stricter limit, never an oversell)
	quotaRefused := scenario == "mid-apply" || (err != nil && strings.Contains(err.Error(), stale[1]))
	if !errors.Is(err, topology.ErrInvalid) || !strings.Contains(err.Error(), "n3") || !strings.Contains(err.Error(), stale[0]) || !quotaRefused {
		units, quota := sellable(t, ctx, rejoin, user)
		t.Fatalf("giving n3 route c again while it holds c's stale counters = %v; want topology.ErrInvalid naming n3, %s and %s (after it, c/s has %d sellable units of 10 loaded, 2 sold; %s's count is %d, want 2)",
			err, stale[0], stale[1], units, user, quota)
	}
	for _, k := range stale {
		if n3.Exists(ctx, k).Val() != 1 {
			t.Fatalf("the refused apply changed %s on n3", k)
		}
	}
	// the operator deletes what the refusal names; mid-apply the quota
	// counter is left, and counted twice (u's limit stricter)
	named, wantQuota := stale, int64(2)
	if scenario == "mid-apply" {
		named, wantQuota = stale[:1], 4
	}
	if n3.Del(ctx, named...).Err() != nil {
		t.Fatal("deleting n3's stale keys")
	}
	rep, err := apply(rejoin, nil)
	if err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("giving n3 route c again once the keys named are gone = %+v, %v; want stable", rep, err)
	}
	if units, quota := sellable(t, ctx, rejoin, user); units != 8 || quota != wantQuota {
		t.Fatalf("after n3 joined c: %d sellable units of c/s and %s's count %d; want 8 and %d", units, user, quota, wantQuota)
	}
}

// sellable returns the units of c/s available over c's members at cfg and
// user's quota count at its home there.
func sellable(t *testing.T, ctx context.Context, cfg *config.Config, user string) (int64, int64) {
	t.Helper()
	inv := openInv(t, cfg, Options{})
	lvl, err := inv.GetStock(ctx, "c", "s")
	if err != nil {
		t.Fatal(err)
	}
	var quota int64
	for _, n := range inv.r.Nodes() {
		v, err := n.Client().Get(ctx, quotaKey("c", "s", user)).Int64()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		quota += v
	}
	return lvl.Available, quota
}

// TestJoinKeepsUnitsOfItsOwnTransfer: the apply moving route c off n3
// onto n2 (with 10 units of c/s and user u's count of 2) ran to its end;
// then every node went back below its epoch (n3 to a copy of its data
// from before the move, holding both again; n1 and n2 to their records
// only), so applying the same topology again runs at the same token, as
// another attempt. n2 joins c holding c's units and u's count: put there
// by this very change's transfers (their markers on n2), not stale. The
// apply must go through, and the rerun of each transfer (same id) must
// count the units once: its in is a no-op on n2, its done subtracts on
// n3 what n3's copy holds again.
func TestJoinKeepsUnitsOfItsOwnTransfer(t *testing.T) {
	t.Parallel()
	srvs := redistest.StartN(t, 3, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addrs := map[string]string{"n1": srvs[0].Addr(), "n2": srvs[1].Addr(), "n3": srvs[2].Addr()}
	three := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n3"}})
	two := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n2"}})
	n1, n2, n3 := srvs[0].Client(t), srvs[1].Client(t), srvs[2].Client(t)
	user := userHomedOn(t, "n2", "n2")
	loadAndBuyTwo(t, ctx, openInv(t, three, Options{}), user)
	old1, old2, old3 := copyEpoch(t, n1), copyEpoch(t, n2), takeCopy(t, n3)
	quiet := slog.New(slog.DiscardHandler)
	apply := func() (topology.Report, error) {
		return ApplyTopology(ctx, ApplyOptions{To: two, From: three, Wait: 5 * time.Second, Logger: quiet})
	}
	if rep, err := apply(); err != nil || rep.Phase != topology.PhaseStable || rep.StockMoved != 1 || rep.QuotasMoved != 1 {
		t.Fatalf("moving route c off n3 = %+v, %v", rep, err)
	}
	old1.restore(t, n1)
	old2.restore(t, n2)
	old3.restore(t, n3)
	rep, err := apply()
	if err != nil || rep.Phase != topology.PhaseStable || rep.ToEpoch != 2 {
		t.Fatalf("applying two again at the same token = %+v, %v; want stable at epoch 2", rep, err)
	}
	if units, quota := sellable(t, ctx, two, user); units != 8 || quota != 2 {
		t.Fatalf("after the second attempt: %d sellable units of c/s and %s's count %d; want 8 and 2", units, user, quota)
	}
	if lvl, err := openInv(t, two, Options{}).GetStock(ctx, "c", "s"); err != nil || lvl.Loaded != 10 || lvl.Confirmed != 2 {
		t.Fatalf("GetStock(c, s) = %+v, %v; want 10 loaded, 2 confirmed", lvl, err)
	}
}

// loadAndBuyTwo loads 10 units of c/s with a per-user limit of 5, and
// user buys 2 of them (order o-u, confirmed); inv is closed.
func loadAndBuyTwo(t *testing.T, ctx context.Context, inv *Inventory, user string) {
	t.Helper()
	if _, err := inv.LoadStock(ctx, "c", "s", 10, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Reserve(ctx, "o-u", []Item{{Route: "c", SKU: "s", Quantity: 2}}, user, time.Hour); err != nil {
		t.Fatal(err)
	}
	if out, err := inv.Confirm(ctx, "o-u"); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm o-u = %+v, %v", out, err)
	}
	inv.Close()
}
