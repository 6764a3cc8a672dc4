package inventory

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/topology"
)

// TestForwardTakesBackAStockHashMovedOff: route c moves off n3 (which
// stays for route d), its 10 units transferred to n2. Then n3 goes back to
// a copy taken before the apply and is accepted: it holds c's 10 units
// again, 20 over all nodes. The apply of the current topology, bringing
// n3 forward, takes them off n3 again (the transfer's marker on n2 shows
// n2 holds them): 10 over all nodes, n2's unchanged. Before, the move
// forward ran no step of the transfer, and the units stayed on n3 for
// good, out of reach until an apply gave n3 route c again, which would
// have sold them twice (the schedule explorer's seed 152086). A run that
// dies between the take back's out and done (crash point "take-back")
// leaves n3 behind, and the next run finishes it; a rerun once n3 is
// forward takes nothing.
func TestForwardTakesBackAStockHashMovedOff(t *testing.T) {
	t.Parallel()
	for _, crash := range []string{"", "take-back"} {
		t.Run("crash="+crash, func(t *testing.T) { takeBackAfterGoingBack(t, crash) })
	}
}

func takeBackAfterGoingBack(t *testing.T, crash string) {
	srvs := redistest.StartN(t, 3, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addrs := map[string]string{"n1": srvs[0].Addr(), "n2": srvs[1].Addr(), "n3": srvs[2].Addr()}
	before := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n3"}, "d": {"n3"}})
	after := leaveConfig(t, addrs, map[string][]string{"a": {"n1"}, "b": {"n2"}, "c": {"n2"}, "d": {"n3"}})
	n2, n3 := srvs[1].Client(t), srvs[2].Client(t)
	if _, err := openInv(t, before, Options{}).LoadStock(ctx, "c", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	old3 := takeCopy(t, n3)
	quiet := slog.New(slog.DiscardHandler)
	rep, err := ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet})
	if err != nil || rep.Phase != topology.PhaseStable || rep.StockMoved != 1 {
		t.Fatalf("moving route c off n3 = %+v, %v; want stable, 1 stock hash moved", rep, err)
	}
	loaded := func(c *redis.Client) int64 {
		v, err := c.HGet(ctx, stockKey("c", "s"), "loaded").Int64()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		return v
	}
	if l2, l3 := loaded(n2), loaded(n3); l2 != 10 || l3 != 0 {
		t.Fatalf("after the move: n2 holds %d, n3 %d loaded; want 10 and 0", l2, l3)
	}
	old3.restore(t, n3) // n3 goes back to the copy: route c's 10 units again
	acceptNode(t, ctx, after, n3, "n3")
	if l3 := loaded(n3); l3 != 10 {
		t.Fatalf("n3 back to the copy holds %d loaded, want 10", l3)
	}
	if crash != "" {
		_, err := ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet, Faults: crashAtPoint(crash)})
		if !errors.Is(err, ErrCrashed) {
			t.Fatalf("apply crashed at %s = %v, want ErrCrashed", crash, err)
		}
	}
	rep, err = ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet})
	if l2, l3 := loaded(n2), loaded(n3); l2 != 10 || l3 != 0 {
		t.Errorf("after n3 was brought forward: n2 holds %d, n3 %d loaded; want 10 and 0 (10 loaded in all)", l2, l3)
	}
	if err != nil || rep.Phase != topology.PhaseStable || !reflect.DeepEqual(rep.Forward, []string{"n3"}) || rep.TakenBack != 1 {
		t.Fatalf("the apply after n3 went back = %+v, %v; want stable, n3 brought forward, 1 counter taken back", rep, err)
	}
	if n := n3.Exists(ctx, xferKey(xferID(rep.ToEpoch, xferStock, "n3", stockKey("c", "s")))).Val(); n != 0 {
		t.Errorf("the take back left its transfer record on n3")
	}
	lvl, err := openInv(t, after, Options{}).GetStock(ctx, "c", "s")
	if err != nil || lvl.Loaded != 10 || lvl.Available != 10 {
		t.Errorf("GetStock(c, s) = %+v, %v; want 10 loaded, 10 available", lvl, err)
	}
	rep, err = ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet})
	if err != nil || !rep.AlreadyApplied || rep.TakenBack != 0 {
		t.Fatalf("rerun = %+v, %v; want already applied, nothing taken back", rep, err)
	}
}
