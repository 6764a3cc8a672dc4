package inventory

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/topology"
)

// copyBeforeXferOut is the tests' Faults: it passes every script call
// through, but takes a copy of node's data (once) just before the first
// transfer's out is sent there, and crashes nowhere.
type copyBeforeXferOut struct {
	t    *testing.T
	node string
	c    *redis.Client
	once sync.Once
	copy nodeCopy
}

func (f *copyBeforeXferOut) Call(_ context.Context, call ScriptCall, send func() (any, error)) (any, error) {
	if call.Node == f.node && call.Script == "xfer-out" {
		f.once.Do(func() { f.copy = takeCopy(f.t, f.c) })
	}
	return send()
}

func (f *copyBeforeXferOut) Crash(context.Context, string) bool { return false }

// TestApplyTakesBackFromACopyTakenDuringStep3: route c moves off n3
// (which stays for route d); n3's copy is taken during the apply's step
// 3, once n3 is bumped but before its stock moved (phase migrating at the
// new token, c's 10 units still there), and the apply ends stable. n3
// goes back to that copy and is accepted unfenced (every peer holds the
// same token and attempt): it is at the token, migrating, with c's 10
// units, which n2 holds too. The apply of the current topology resumes
// (a record at the token is migrating), but step 3 had ended (records at
// the token are stable), so it moved nothing and wrote n3 stable: the 10
// units stayed on n3 for good, counted twice (the schedule explorer's
// seeds 155100 and 155263: 26 units of a SKU where 14 were loaded). Now
// such a node is treated as one that went back: its counters are taken
// back (the transfer's marker on n2 says n2 holds them). A run that dies
// between the take back's out and done (crash point "take-back") leaves
// n3 migrating, and the next run finishes it.
func TestApplyTakesBackFromACopyTakenDuringStep3(t *testing.T) {
	t.Parallel()
	for _, crash := range []string{"", "take-back"} {
		t.Run("crash="+crash, func(t *testing.T) { takeBackMidStep3(t, crash) })
	}
}

func takeBackMidStep3(t *testing.T, crash string) {
	ctx, srvs, before, after := routeCOffN3(t)
	n2, n3 := srvs[1].Client(t), srvs[2].Client(t)
	inv := openInv(t, before, Options{})
	if _, err := inv.LoadStock(ctx, "c", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	inv.Close()
	quiet := slog.New(slog.DiscardHandler)
	f := &copyBeforeXferOut{t: t, node: "n3", c: n3}
	rep, err := ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet, Faults: f})
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
	f.copy.restore(t, n3)
	if fenced := acceptNode(t, ctx, after, n3, "n3"); fenced {
		t.Fatal("setup: n3 fenced; want it accepted at the token (same token and attempt as its peers)")
	}
	if l3, phase := loaded(n3), n3.HGet(ctx, keyTopology, "phase").Val(); l3 != 10 || phase != string(topology.PhaseMigrating) {
		t.Fatalf("setup: n3 back to the copy holds %d loaded, phase %q; want 10, migrating", l3, phase)
	}
	if crash != "" {
		_, err := ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet, Faults: crashAtPoint(crash)})
		if !errors.Is(err, ErrCrashed) {
			t.Fatalf("apply crashed at %s = %v, want ErrCrashed", crash, err)
		}
	}
	rep, err = ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet})
	if err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("the apply after n3 went back = %+v, %v; want stable", rep, err)
	}
	if l2, l3 := loaded(n2), loaded(n3); l2 != 10 || l3 != 0 {
		t.Errorf("after the apply: n2 holds %d loaded, n3 %d; want 10 and 0 (counted once)", l2, l3)
	}
	if rep.TakenBack != 1 {
		t.Errorf("taken back %d; want 1 (c/s off n3)", rep.TakenBack)
	}
	rep, err = ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet})
	if err != nil || !rep.AlreadyApplied {
		t.Fatalf("rerun = %+v, %v; want already applied", rep, err)
	}
}
