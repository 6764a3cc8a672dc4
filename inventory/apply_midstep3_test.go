package inventory

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/topology"
)

// copyBeforeScript is the tests' Faults: it passes every script call
// through, and takes a copy of c's node's data (once) just before the
// first call of script on node; it crashes nowhere.
type copyBeforeScript struct {
	t            *testing.T
	node, script string
	c            *redis.Client
	once         sync.Once
	copy         nodeCopy
}

// Call implements Faults.
func (f *copyBeforeScript) Call(_ context.Context, call ScriptCall, send func() (any, error)) (any, error) {
	if call.Node == f.node && call.Script == f.script {
		f.once.Do(func() { f.copy = takeCopy(f.t, f.c) })
	}
	return send()
}

// Crash implements Faults: never.
func (f *copyBeforeScript) Crash(context.Context, string) bool { return false }

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
// in its take back (crash point "take-back") leaves n3 migrating, and the
// next run finishes it.
func TestApplyTakesBackFromACopyTakenDuringStep3(t *testing.T) {
	t.Parallel()
	for _, crash := range []string{"", "take-back"} {
		t.Run("crash="+crash, func(t *testing.T) { takeBackMidStep3(t, crash) })
	}
}

func takeBackMidStep3(t *testing.T, crash string) {
	w := newMidStep3(t, 2)
	n3 := w.srvs[2].Client(t)
	w.copy.restore(t, n3)
	if fenced := acceptNode(t, w.ctx, w.after, n3, "n3"); fenced {
		t.Fatal("setup: n3 fenced; want it accepted at the token (same token and attempt as its peers)")
	}
	if l3, phase := w.loaded(t, 2), n3.HGet(w.ctx, keyTopology, "phase").Val(); l3 != 10 || phase != string(topology.PhaseMigrating) {
		t.Fatalf("setup: n3 back to the copy holds %d loaded, phase %q; want 10, migrating", l3, phase)
	}
	if crash != "" {
		if _, err := w.apply(crashAtPoint(crash)); !errors.Is(err, ErrCrashed) {
			t.Fatalf("apply crashed at %s = %v, want ErrCrashed", crash, err)
		}
	}
	rep, err := w.apply(nil)
	if err != nil || rep.Phase != topology.PhaseStable {
		t.Fatalf("the apply after n3 went back = %+v, %v; want stable", rep, err)
	}
	if l2, l3 := w.loaded(t, 1), w.loaded(t, 2); l2 != 10 || l3 != 0 {
		t.Errorf("after the apply: n2 holds %d loaded, n3 %d; want 10 and 0 (counted once)", l2, l3)
	}
	if rep.TakenBack != 1 {
		t.Errorf("taken back %d; want 1 (c/s off n3)", rep.TakenBack)
	}
	if rep, err := w.apply(nil); err != nil || !rep.AlreadyApplied {
		t.Fatalf("rerun = %+v, %v; want already applied", rep, err)
	}
}

// midStep3 is a world in which route c (10 units of c/s on n3) moved off
// n3 onto n2 (routeCOffN3's after, stable), with a copy of one node's data
// taken during that apply's step 3, just before n3's transfer's out
// (copy), and n3's taken before the apply (old3).
type midStep3 struct {
	ctx        context.Context
	srvs       []*redistest.Server
	after      *config.Config
	copy, old3 nodeCopy
	quiet      *slog.Logger
}

// newMidStep3 builds a midStep3 whose copy during step 3 is of node
// copyOf (0, 1, 2: n1, n2, n3).
func newMidStep3(t *testing.T, copyOf int) *midStep3 {
	t.Helper()
	ctx, srvs, before, after := routeCOffN3(t)
	inv := openInv(t, before, Options{})
	if _, err := inv.LoadStock(ctx, "c", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	inv.Close()
	w := &midStep3{ctx: ctx, srvs: srvs, after: after, quiet: slog.New(slog.DiscardHandler)}
	w.old3 = takeCopy(t, srvs[2].Client(t))
	f := &copyBeforeScript{t: t, node: "n3", script: xferOutScript.name, c: srvs[copyOf].Client(t)}
	rep, err := ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: w.quiet, Faults: f})
	if err != nil || rep.Phase != topology.PhaseStable || rep.StockMoved != 1 {
		t.Fatalf("moving route c off n3 = %+v, %v; want stable, 1 stock hash moved", rep, err)
	}
	w.copy = f.copy
	return w
}

// apply applies w.after (with faults f, if any).
func (w *midStep3) apply(f Faults) (topology.Report, error) {
	opts := ApplyOptions{To: w.after, Wait: 5 * time.Second, Logger: w.quiet}
	if f != nil {
		opts.Faults = f
	}
	return ApplyTopology(w.ctx, opts)
}

// loaded is c/s's loaded count on node i (0, 1, 2: n1, n2, n3).
func (w *midStep3) loaded(t *testing.T, i int) int64 {
	t.Helper()
	v, err := w.srvs[i].Client(t).HGet(w.ctx, stockKey("c", "s"), "loaded").Int64()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return v
}
