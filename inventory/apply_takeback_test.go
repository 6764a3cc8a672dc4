package inventory

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/topology"
)

// TestForwardTakesBackAStockHashMovedOff: route c moves off n3 (which
// stays for route d), its 10 units and user u's quota count of 2
// transferred to n2. Then n3 goes back to a copy taken before the apply
// and is accepted: it holds c's 10 units and u's count again, each
// counted twice over all nodes. The apply of the current topology,
// bringing n3 forward, takes both off n3 again (the transfers' markers on
// n2 show n2 holds them): each counted once, n2's unchanged. Before, the move
// forward ran no step of the transfer, and the units stayed on n3 for
// good, out of reach until an apply gave n3 route c again, which would
// have sold them twice (the schedule explorer's seed 152086). A run that
// dies in its take back (crash point "take-back") leaves n3 behind, and
// the next run finishes it; a rerun once n3 is forward takes nothing.
func TestForwardTakesBackAStockHashMovedOff(t *testing.T) {
	t.Parallel()
	for _, crash := range []string{"", "take-back"} {
		t.Run("crash="+crash, func(t *testing.T) { takeBackAfterGoingBack(t, crash) })
	}
}

func takeBackAfterGoingBack(t *testing.T, crash string) {
	ctx, srvs, before, after := routeCOffN3(t)
	n2, n3 := srvs[1].Client(t), srvs[2].Client(t)
	inv := openInv(t, before, Options{})
	if _, err := inv.LoadStock(ctx, "c", "s", 10, 5); err != nil {
		t.Fatal(err)
	}
	// user u buys 2 of the limit's 5: a quota counter of 2 on n3
	if _, err := inv.Reserve(ctx, "o-u", []Item{{Route: "c", SKU: "s", Quantity: 2}}, "u", time.Hour); err != nil {
		t.Fatal(err)
	}
	if out, err := inv.Confirm(ctx, "o-u"); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm o-u = %+v, %v", out, err)
	}
	inv.Close()
	quota := func(c *redis.Client) int64 {
		v, err := c.Get(ctx, quotaKey("c", "s", "u")).Int64()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		return v
	}
	if q := quota(n3); q != 2 {
		t.Fatalf("u's quota count on n3 = %d, want 2", q)
	}
	old3 := takeCopy(t, n3)
	quiet := slog.New(slog.DiscardHandler)
	rep, err := ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet})
	if err != nil || rep.Phase != topology.PhaseStable || rep.StockMoved != 1 || rep.QuotasMoved != 1 {
		t.Fatalf("moving route c off n3 = %+v, %v; want stable, 1 stock hash and 1 quota counter moved", rep, err)
	}
	loaded := func(c *redis.Client) int64 {
		v, err := c.HGet(ctx, stockKey("c", "s"), "loaded").Int64()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		return v
	}
	if l2, l3, q2, q3 := loaded(n2), loaded(n3), quota(n2), quota(n3); l2 != 10 || l3 != 0 || q2 != 2 || q3 != 0 {
		t.Fatalf("after the move: n2 holds %d loaded and u's count %d, n3 %d and %d; want 10 and 2, 0 and 0", l2, q2, l3, q3)
	}
	old3.restore(t, n3) // n3 goes back to the copy: route c's 10 units again
	acceptNode(t, ctx, after, n3, "n3")
	if l3, q3 := loaded(n3), quota(n3); l3 != 10 || q3 != 2 {
		t.Fatalf("n3 back to the copy holds %d loaded and u's count %d, want 10 and 2", l3, q3)
	}
	if crash != "" {
		_, err := ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet, Faults: crashAtPoint(crash)})
		if !errors.Is(err, ErrCrashed) {
			t.Fatalf("apply crashed at %s = %v, want ErrCrashed", crash, err)
		}
	}
	rep, err = ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet})
	if l2, l3, q2, q3 := loaded(n2), loaded(n3), quota(n2), quota(n3); l2 != 10 || l3 != 0 || q2 != 2 || q3 != 0 {
		t.Errorf("after n3 was brought forward: n2 holds %d loaded and u's count %d, n3 %d and %d; want 10 and 2, 0 and 0 (each counted once)", l2, q2, l3, q3)
	}
	if err != nil || rep.Phase != topology.PhaseStable || !reflect.DeepEqual(rep.Forward, []string{"n3"}) || rep.TakenBack != 2 {
		t.Fatalf("the apply after n3 went back = %+v, %v; want stable, n3 brought forward, 2 counters taken back", rep, err)
	}
	if n := n3.Exists(ctx, xferKey(xferID(rep.ToEpoch, xferStock, "n3", stockKey("c", "s")))).Val(); n != 0 {
		t.Errorf("the take back left its transfer record on n3")
	}
	lvl, err := openInv(t, after, Options{}).GetStock(ctx, "c", "s")
	if err != nil || lvl.Loaded != 10 || lvl.Available != 8 || lvl.Confirmed != 2 {
		t.Errorf("GetStock(c, s) = %+v, %v; want 10 loaded, 8 available, 2 confirmed", lvl, err)
	}
	rep, err = ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet})
	if err != nil || !rep.AlreadyApplied || rep.TakenBack != 0 {
		t.Fatalf("rerun = %+v, %v; want already applied, nothing taken back", rep, err)
	}
}

// TestForwardNamesTheReservedStockHashItLeaves: n3's copy holds route c's
// stock with 3 units reserved and user u's quota count of 3 (an order
// pending then, cancelled before the apply moved c off n3). Brought
// forward, n3's hash and u's counter are busy: the take back leaves them
// (the reconcilers settle the copy's parts once n3 is forward) and says
// so in the report, naming the node, the key and why, so that the
// operator, and the schedule explorer's stock check, know which units
// are counted twice though no instance reads them there. The move
// forward named the hash in a log line only, and the counter nowhere.
func TestForwardNamesTheReservedStockHashItLeaves(t *testing.T) {
	t.Parallel()
	ctx, _, after, n3, old3 := routeCOffN3WithABusyCopy(t)
	quiet := slog.New(slog.DiscardHandler)
	if rep, err := ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet}); err != nil || rep.Phase != topology.PhaseStable || rep.StockMoved != 1 {
		t.Fatalf("moving route c off n3 = %+v, %v; want stable, 1 stock hash moved", rep, err)
	}
	old3.restore(t, n3)
	acceptNode(t, ctx, after, n3, "n3")
	rep, err := ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet})
	if err != nil || rep.Phase != topology.PhaseStable || !reflect.DeepEqual(rep.Forward, []string{"n3"}) {
		t.Fatalf("the apply after n3 went back = %+v, %v; want stable, n3 brought forward", rep, err)
	}
	want := []topology.LeftCounter{{Node: "n3", Key: quotaKey("c", "s", "u"), Why: "held by pending parts"},
		{Node: "n3", Key: stockKey("c", "s"), Why: "units reserved"}}
	if rep.TakenBack != 0 || !reflect.DeepEqual(rep.LeftBehind, want) {
		t.Errorf("taken back %d, left behind %+v; want 0 and %+v", rep.TakenBack, rep.LeftBehind, want)
	}
}

// routeCOffN3 starts n1..n3 and returns a context bounded for the test
// (cancelled at its end), the servers, and two configurations: before,
// routes a, b, c, d on n1, n2, n3, n3; after, route c moved to n2 (n3
// stays for d).
func routeCOffN3(t *testing.T) (context.Context, []*redistest.Server, *config.Config, *config.Config) {
	t.Helper()
	srvs := redistest.StartN(t, 3, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	addrs := map[string]string{"n1": srvs[0].Addr(), "n2": srvs[1].Addr(), "n3": srvs[2].Addr()}
	before := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n3"}, "d": {"n3"}})
	after := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n2"}, "d": {"n3"}})
	return ctx, srvs, before, after
}

// routeCOffN3WithABusyCopy is routeCOffN3 with 10 units of c/s loaded
// (a per-user limit of 5) and a copy of n3 taken while user u's order o-p
// held 3 of them reserved, o-p cancelled since: the copy's stock hash and
// u's quota counter are busy. It returns the context, the servers, the
// topology without n3 in route c, n3's client and the copy.
func routeCOffN3WithABusyCopy(t *testing.T) (context.Context, []*redistest.Server, *config.Config, *redis.Client, nodeCopy) {
	t.Helper()
	ctx, srvs, before, after := routeCOffN3(t)
	n3 := srvs[2].Client(t)
	inv := openInv(t, before, Options{})
	if _, err := inv.LoadStock(ctx, "c", "s", 10, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Reserve(ctx, "o-p", []Item{{Route: "c", SKU: "s", Quantity: 3}}, "u", time.Hour); err != nil {
		t.Fatal(err)
	}
	old3 := takeCopy(t, n3) // o-p's 3 units reserved in it
	if _, err := inv.Cancel(ctx, "o-p"); err != nil {
		t.Fatal(err)
	}
	inv.Close()
	return ctx, srvs, after, n3, old3
}
