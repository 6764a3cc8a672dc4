package inventory

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/topology"
)

// afterScript is the tests' Faults: it passes every script call through,
// and runs then once, just after the first call of script on node
// answered; it crashes nowhere.
type afterScript struct {
	node, script string
	then         func()
	once         sync.Once
}

// Call implements Faults.
func (f *afterScript) Call(_ context.Context, call ScriptCall, send func() (any, error)) (any, error) {
	v, err := send()
	if call.Node == f.node && call.Script == f.script {
		f.once.Do(f.then)
	}
	return v, err
}

// Crash implements Faults: never.
func (f *afterScript) Crash(context.Context, string) bool { return false }

// TestResumeTakesBackBeforeItBumpsANodeBehind: apply A moves route c off
// n3 (its 10 units of c/s to n2: out, in, done). Before A writes stable,
// n3 goes back to a copy from before A (c's 10 units again, at the older
// epoch) and is accepted (fenced). Apply B of the same change resumes
// (A's records are migrating): it retires what came back on n3 and bumps
// it, then dies: after its own transfer's out on n3 (crash point
// "xfer-out": the record of the transfer left there), or right after the
// bump (crash point "bump": nothing of its step 3 ran). A, whose step 3
// had passed n3 before it went back, then writes stable on every node,
// n3 included (at the token since B's bump). Before, no later apply
// touched n3 (every node stable at the token: already applied), and c's
// 10 units stayed there, counted on n2 too, with, after "xfer-out", the
// transfer's record (the schedule explorer's seed 168235 of PROFILE=crash
// TOPOLOGY=0.6 TWIN=0.4 MOVED=0.6 SHRINK=0.5 LOSS=0.5 LOSS2=0.3
// RESTART=0.2 REJOIN=0.4: 24 loaded where 14 were). Now B takes back,
// before it bumps n3, what A's transfer had moved off it (the marker on
// n2): counted once, whichever apply's step 3 or step 4 comes next.
// (Since step 4 writes a node stable only at the incarnation read before
// its step 3 began, A's step 4 refuses n3 when B left it migrating, and
// the run again brings n3 forward; TestStableRefusedOnACopyTakenDuring
// Step3AcceptedBeforeStep4.)
func TestResumeTakesBackBeforeItBumpsANodeBehind(t *testing.T) {
	t.Parallel()
	for _, crash := range []string{"xfer-out", "bump"} {
		t.Run("crash="+crash, func(t *testing.T) { resumeBesideAConcurrentStep4(t, crash) })
	}
}

func resumeBesideAConcurrentStep4(t *testing.T, crash string) {
	ctx, srvs, before, after := routeCOffN3(t)
	n2, n3 := srvs[1].Client(t), srvs[2].Client(t)
	inv := openInv(t, before, Options{})
	if _, err := inv.LoadStock(ctx, "c", "s", 10, 0); err != nil {
		t.Fatal(err)
	}
	inv.Close()
	old3 := takeCopy(t, n3)
	quiet := slog.New(slog.DiscardHandler)
	loaded := func(c *redis.Client) int64 {
		v, err := c.HGet(ctx, stockKey("c", "s"), "loaded").Int64()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		return v
	}
	var resumed topology.Report
	var resumeErr error
	// A's last script call before its stable writes is its transfer's done
	// on n3: its step 3 has passed n3 then
	a := &afterScript{node: "n3", script: xferDoneScript.name, then: func() {
		if l2, l3 := loaded(n2), loaded(n3); l2 != 10 || l3 != 0 {
			t.Errorf("setup: after A's transfer n2 holds %d loaded, n3 %d; want 10 and 0", l2, l3)
		}
		old3.restore(t, n3)
		if fenced := acceptNode(t, ctx, after, n3, "n3"); !fenced {
			t.Error("setup: n3 accepted unfenced; want it fenced behind its peers")
		}
		resumed, resumeErr = ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet, Faults: crashAtPoint(crash)})
	}}
	rep, err := ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet, Faults: a})
	switch {
	case rep.StockMoved != 1:
		t.Fatalf("apply A = %+v, %v; want 1 stock hash moved", rep, err)
	case err == nil && rep.Phase == topology.PhaseStable:
		// B wrote n3 stable before A's step 4 reached it
	case errors.Is(err, ErrTopology) && strings.Contains(err.Error(), "incarnation"):
		// A's step 4 refused n3, accepted since A's step 3 began (B left
		// it migrating): the run again below brings it forward
	default:
		t.Fatalf("apply A = %+v, %v; want stable, or its step 4 refused on n3 for its new incarnation", rep, err)
	}
	switch {
	case resumeErr == nil && resumed.Phase == topology.PhaseStable && resumed.TakenBack == 1:
		// the fix: B took c/s back before its bump, so its step 3 found
		// nothing to move on n3 (no out, no crash there) and ran to its end
	case errors.Is(resumeErr, ErrCrashed):
	default:
		t.Fatalf("apply B (crash at %s) = %+v, %v; want it crashed, or stable with 1 counter taken back", crash, resumed, resumeErr)
	}
	if again, err := ApplyTopology(ctx, ApplyOptions{To: after, Wait: 5 * time.Second, Logger: quiet}); err != nil || again.Phase != topology.PhaseStable {
		t.Fatalf("apply again = %+v, %v; want stable", again, err)
	}
	if l2, l3 := loaded(n2), loaded(n3); l2 != 10 || l3 != 0 {
		t.Errorf("at the end: n2 holds %d loaded, n3 %d; want 10 and 0 (counted once)", l2, l3)
	}
	if n := n3.Exists(ctx, xferKey(xferID(rep.ToEpoch, xferStock, "n3", stockKey("c", "s")))).Val(); n != 0 {
		t.Errorf("a transfer record of c/s is left on n3")
	}
	lvl, err := openInv(t, after, Options{}).GetStock(ctx, "c", "s")
	if err != nil || lvl.Loaded != 10 || lvl.Available != 10 {
		t.Errorf("GetStock(c, s) = %+v, %v; want 10 loaded, 10 available", lvl, err)
	}
}
