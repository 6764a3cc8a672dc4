package explore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/rollback"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// healBound is how long past its deadline a part may stay pending while
// the fault-free healer runs: the "nothing pending past its deadline plus
// a bound" check.
const healBound = 2 * time.Second

// heal brings the world to quiescence without faults, as operators and
// the background reconcilers would. If the nodes are at T1 (the topology
// actor added n4 and did not remove it), T1's apply is finished with an
// instance of T1 reconciling (its pending parts may hold quota counters
// the apply must move), then T0 is applied again (T2 in a schedule that
// shrinks route c: observed.shrink); an unfinished T0 apply is finished
// the same way, the healer reconciling, and an unfinished T2 apply too,
// an instance of T1 reconciling (it names every node of T1 and T2: while
// T2 migrates, a part's order may still have its previous home on n4,
// which the healer's configuration lacks, and c's parts on n3 hold the
// stock the apply is to move off it). Then the reconciler runs until no
// part is pending, waiting for deadlines, for at most healBound past the
// latest one. After the topology actor's rejoin (rejoin.go) the nodes
// are at T1 again, stable or mid-apply, or, its apply refused, still at
// T0 or T2: the heal goes on from there as from the first T1, so it
// still ends at T0 or T2. Each apply is the operator's (healApply): one
// refused for stale counters is answered as the refusal says, and run
// again. It returns the time spent waiting, and why the topology could
// not be brought back to a stable T0 or T2 (a violation), if it could
// not.
func (w *World) heal(ctx context.Context, o *observed, healer *inventory.Inventory) (waited time.Duration, topoProblem string, err error) {
	at, stable, err := w.topologyNow(ctx)
	if err != nil {
		return 0, "", err
	}
	to := at // the topology the heal ends at
	if at == "T1" || (at == "T2" && !stable) {
		// finish an interrupted bump: the instance of T1 acts only once
		// every node is at the newest token
		_ = w.healApply(ctx, o, at, 50*time.Millisecond)
		d, err := w.settleT1(ctx, o)
		if err != nil {
			return 0, "", err
		}
		waited += d
	}
	if at == "T1" {
		if err := w.healApply(ctx, o, "T1", 3*time.Second); err != nil {
			return waited, err.Error(), w.waitUsable(ctx)
		}
		o.mu.Lock()
		to = "T0"
		if o.shrink {
			to = "T2"
		}
		o.mu.Unlock()
	}
	if at == "T1" || !stable {
		if at == "T0" {
			waited += w.settleAll(ctx, o, healer)
		}
		if err := w.healApply(ctx, o, to, 3*time.Second); err != nil {
			topoProblem = err.Error()
		}
	}
	if err := w.waitUsable(ctx); err != nil {
		return waited, topoProblem, err
	}
	return waited + w.settleAll(ctx, o, healer), topoProblem, nil
}

// settleT1 runs settleAll with an instance of T1, unfaulted.
func (w *World) settleT1(ctx context.Context, o *observed) (time.Duration, error) {
	r, err := router.New(ctx, w.cfg1, router.Options{KeepData: w.cfg1.KeepData(), Logger: discard})
	if err != nil {
		return 0, fmt.Errorf("explore: T1 router: %w", err)
	}
	defer func() { _ = r.Close() }()
	inv1, err := inventory.New(r, inventory.Options{Logger: discard})
	if err != nil {
		return 0, nil // as before: the apply then reports what holds it
	}
	defer inv1.Close()
	return w.settleAll(ctx, o, inv1), nil
}

// settleAll runs inv's reconciler until no part is pending on the nodes
// (each pass after moving every part set aside back to pending:
// retryStuck), waiting for deadlines, for at most healBound past the
// latest one, read again after every pass: a pass may rightly put a part
// off past its own deadline (ResolveExpired: its order, still reserved by
// the same attempt, runs to a later deadline of its own, as when the
// order's stage landed long after its parts' takes), and the wait follows
// it. It stops after healCap in all whatever the deadlines say (a
// reconciler that keeps putting a part off is left to the checks). In
// a schedule with the operator actor (o.operator; o may be nil) each
// pass first runs the operator's procedure on the parts set aside
// (tendAll), and so does one more after the last: an operator settles
// what no retry settles (a part whose record is gone, which the last
// pass may have set aside). It returns the time it waited.
func (w *World) settleAll(ctx context.Context, o *observed, inv *inventory.Inventory) (waited time.Duration) {
	r := rollback.New(inv, nil, rollback.Settings{Logger: discard})
	start := time.Now()
	operator := false
	if o != nil {
		o.mu.Lock()
		operator = o.operator
		o.mu.Unlock()
	}
	last := false // the operator's pass after the last reconciler pass ran
	for {
		if operator {
			w.tendAll(ctx, o, inv)
		}
		if last {
			return waited
		}
		w.retryStuck(ctx, inv)
		r.RunOnce(ctx)
		earliest, latest, n, err := w.pendingSpan(ctx)
		now := time.Now()
		if err != nil || n == 0 || now.After(latest.Add(healBound)) || now.Sub(start) > healCap {
			// the operator looks once more: the last pass may have set
			// a part aside (a part whose record is gone) that no retry
			// settles
			if !operator {
				return waited
			}
			last = true
			continue
		}
		d := max(earliest.Sub(now)+10*time.Millisecond, 10*time.Millisecond)
		time.Sleep(d)
		waited += d
	}
}

// retryStuck moves every part set aside on a node inv names back into
// its pending index, due now, as an operator's `shardis parts retry` does
// once the cause is repaired: the heal runs without faults, so a part a
// fault set aside settles, and one that fails again is set aside again,
// for checkStuck. A part set aside on a node inv does not name (n4 under
// T0) stays: nothing of that instance would settle it.
func (w *World) retryStuck(ctx context.Context, inv *inventory.Inventory) {
	for _, name := range allNodes {
		parts, err := inv.StuckParts(ctx, name, 10000)
		if err != nil {
			continue
		}
		for _, p := range parts {
			_, _ = inv.RetryStuck(ctx, name, p.PartID)
		}
	}
}

// healCap bounds settleAll's whole wait.
const healCap = 15 * time.Second

// topologyNow says which topology the nodes' newest record is ("T0",
// "T1" or "T2") and whether every node of it is stable at that record's
// token.
func (w *World) topologyNow(ctx context.Context) (at string, stable bool, err error) {
	var recs []topology.Record
	// a node that restarted is held back a while (node: "A new server
	// process"), so a failed read is tried again for a while
	for give := time.Now().Add(healCap); ; time.Sleep(50 * time.Millisecond) {
		var unread map[string]error
		recs, unread, err = inventory.ReadTopology(ctx, w.cfg1)
		if err == nil && len(unread) > 0 {
			err = fmt.Errorf("%v", unread)
		}
		if err == nil {
			break
		}
		if time.Now().After(give) || ctx.Err() != nil {
			return "", false, fmt.Errorf("explore: reading the topology: %w", err)
		}
	}
	newest, _ := topology.Current(recs) // two copies of an epoch: the heal's apply reports the refusal
	at = "T0"
	members := nodesT0 // T2's too
	switch newest.Current.Fingerprint() {
	case topology.Of(w.cfg1).Fingerprint():
		at, members = "T1", allNodes
	case topology.Of(w.cfg2).Fingerprint():
		at = "T2"
	}
	stable = true
	for _, r := range recs {
		if slices.Contains(members, r.Node) && (r.Token != newest.Token || r.Phase != topology.PhaseStable) {
			stable = false
		}
	}
	return at, stable, nil
}

// apply runs topology apply to "T0", "T1" or "T2" without faults,
// counted in o; an error says why it did not end stable. It runs the
// schedule's mutations (o.bugs): a mutation is a bug of the code, which
// the operator's apply runs too.
func (w *World) apply(ctx context.Context, o *observed, to string, wait time.Duration) error {
	cfrom := w.cfg1 // the addresses of nodes with records
	if to == "T1" {
		cfrom = w.cfg0
	}
	began := time.Now()
	rep, err := inventory.ApplyTopology(ctx, inventory.ApplyOptions{To: w.config(to), From: cfrom, Wait: wait, Logger: discard, Faults: o.bugs.faults()})
	o.applied(to, began, rep, err)
	if err != nil {
		return fmt.Errorf("healing topology apply %s: %w", to, err)
	}
	if rep.Phase != topology.PhaseStable {
		return fmt.Errorf("healing topology apply %s left phase %s (%d waiting)", to, rep.Phase, rep.Waiting)
	}
	return nil
}

// pendingSpan returns the earliest and the latest deadline in the nodes'
// pending indexes and how many parts they hold.
func (w *World) pendingSpan(ctx context.Context) (earliest, latest time.Time, n int, err error) {
	for _, name := range allNodes {
		zs, err := w.direct[name].ZRangeWithScores(ctx, inventory.PendingKey, 0, -1).Result()
		if err != nil {
			return earliest, latest, 0, err
		}
		for _, z := range zs {
			n++
			t := time.UnixMilli(int64(z.Score))
			if earliest.IsZero() || t.Before(earliest) {
				earliest = t
			}
			if t.After(latest) {
				latest = t
			}
		}
	}
	return earliest, latest, n, nil
}

// codeBugs is the [inventory.Faults] of the heal's applies: no fault,
// no crash, only the schedule's mutations (inventory.Mutator).
type codeBugs map[inventory.Mutation]bool

// Call sends c as it is.
func (codeBugs) Call(_ context.Context, _ inventory.ScriptCall, send func() (any, error)) (any, error) {
	return send()
}

// Crash stops at no crash point.
func (codeBugs) Crash(context.Context, string) bool { return false }

// Mutated reports whether the schedule re-introduces m.
func (b codeBugs) Mutated(m inventory.Mutation) bool { return b[m] }

// faults is b as the heal's applies take it: nil without a mutation, so
// an unmutated schedule's heal runs exactly the operator's apply.
func (b codeBugs) faults() inventory.Faults {
	if len(b) == 0 {
		return nil
	}
	return b
}
