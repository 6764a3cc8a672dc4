package explore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/topology"
)

// The rejoin (Options.Rejoin): a node goes back into a route it left.
//
// Once the topology actor's second apply returned (T0: n4 left the
// server; T2 with Options.Shrink: n4 left it and n3 left route c), and
// a drawn number of picks of other calls passed, the actor applies T1
// again: n4 rejoins route c, and with shrink n3 rejoins c too (T2 to T1
// is a change like any other: c's members go from n1, n2 to n3, n4,
// route d goes, which holds nothing, and n4 joins the server). In
// between, the data-loss actor may roll a node back to a copy taken
// while it served c and see it accepted: n3 then holds c's stock hash
// with units the removal had moved to c's nodes of T2, which count them.
// An apply that served them again would sell them twice (a review found
// that it did: inventory/apply_stale.go), so the apply refuses, before it
// writes anything, with an error wrapping topology.ErrInvalid
// (inventory.StaleCountersError): a legitimate outcome, the nodes stay
// at T0 or T2, stable, and the stale hash stays where the checks already
// allow it (a loss gave it back: checkStranded; a move forward left it:
// leftUnits). It is noted in the trace and counted (Result.Rejoins and
// the rest). When the apply returns stable, an instance of T1 reserves
// and confirms one more order of route c, of a drawn quantity: units a
// wrongly served stale hash brings are then sold, not only counted (the
// stock checks fail either way: the total over all nodes exceeds what
// was loaded).
//
// An apply that returns migrating (parts on a node leaving c hold its
// stock there: with shrink, c's parts on n1 and n2) is run again while an
// instance of T1 reconciles, as rerunT2 does. The heal (heal.go) finds
// T1 after a rejoin, stable or mid-apply, and ends as it does after an
// unfinished first T1: T1 finished, then T0 or T2 again. Every apply of
// the heal that is refused for stale counters (a node behind the epoch
// of a resumed bump, or a node joining c again on the way back to T2,
// that went back meanwhile) is answered as the refusal tells the
// operator: settle what is pending, delete the counters it names (none
// while a part pending on its node holds it), apply again (healApply).
// The checks weigh the applies that ran (observed.ran): a rejoin adds
// T1 again, a topology they already know; one refused for stale counters
// wrote nothing and is not recorded as one that ran (observed.applied).

// rejoinPlan is the rejoin's draws (drawRejoin).
type rejoinPlan struct {
	on    bool
	picks int   // picks of other calls between the second apply's return and the rejoin
	qty   int64 // of c/s, the order reserved at T1 again
}

// drawRejoin draws the rejoin with chance p: nothing at all when p is 0
// or negative, so a schedule without it draws what it drew before the
// rejoin was added.
func drawRejoin(s *Scheduler, p float64) rejoinPlan {
	if p <= 0 || !s.Chance(p) {
		return rejoinPlan{}
	}
	plan := rejoinPlan{on: true, picks: s.Intn(40), qty: int64(2 + s.Intn(8))}
	s.Note("-- rejoin drawn: T1 again %d picks after the second apply, then %d of c/s", plan.picks, plan.qty)
	return plan
}

// followRejoin makes the data-loss actor of plan follow the rejoin of
// topo, in half the schedules whose topology actor has one from T2
// (drawn only then: other seeds run as before): n3 goes back after the
// second apply moved route c off it (lossPlan.followBack), to a copy
// that holds c's stock hash, with units reserved by phase 1's orders
// when the copy is taken while they hold them (then the move forward
// after the accept leaves it: inventory/apply_takeback.go), and the
// rejoin, which puts n3 back into c, waits until the actor ended
// (observed.rejoinAfter). A copy taken at the schedule's start holds the
// hash too, unreserved: the move forward takes it back.
func followRejoin(s *Scheduler, o *observed, topo topologyPlan, plan lossPlan) lossPlan {
	if !topo.rejoin.on || !topo.shrink || plan.followReserve != "" || !s.Chance(0.5) {
		return plan
	}
	plan.node, plan.followBack = "n3", topologyBack
	o.mu.Lock()
	o.rejoinAfter = "loss"
	o.mu.Unlock()
	return plan
}

// topologyBack names the topology actor's milestone of its second
// apply's return, with a rejoin (observed.end).
const topologyBack = "topology-back"

// waitLong is observed.waitEnded up to four times over (a wait for an
// actor that runs applies, each of up to two seconds of waiting); none
// when name is "".
func (o *observed) waitLong(ctx context.Context, s *Scheduler, who, name string) {
	for i := 0; i < 4 && name != "" && !o.hasEnded(name); i++ {
		o.waitEnded(ctx, s, who, name)
	}
}

// rejoinOrder is the id of the order the rejoin reserves at T1 again.
const rejoinOrder = "r1"

// rejoinStats counts the rejoin's applies: ran, those that returned
// stable, refused for stale counters, refused otherwise (ErrInvalid).
type rejoinStats struct{ ran, stable, refused, invalid int }

// rejoin is the topology actor's rejoin: from back ("T0" or "T2", where
// its second apply went), after plan.picks picks, T1 again, and at T1
// stable the order of plan.qty units of c/s, reserved and confirmed.
func (w *World) rejoin(ctx context.Context, o *observed, s *Scheduler, who, back string, plan rejoinPlan) {
	o.end(topologyBack)
	o.mu.Lock()
	after := o.rejoinAfter
	o.mu.Unlock()
	o.waitLong(ctx, s, who, after)
	s.Pass(ctx, who, plan.picks)
	rep, err := w.rejoinApply(ctx, o, s, who, back)
	var stale *inventory.StaleCountersError
	o.mu.Lock()
	o.rejoin.ran++
	switch {
	case errors.As(err, &stale):
		o.rejoin.refused++
	case errors.Is(err, topology.ErrInvalid):
		o.rejoin.invalid++
	case err == nil && rep.Phase == topology.PhaseStable:
		o.rejoin.stable++
	}
	o.mu.Unlock()
	if stale != nil {
		var named []string
		for _, f := range stale.Found {
			named = append(named, fmt.Sprintf("%s on %s (%s)", f.Key, f.Node, f.Units))
		}
		s.Note("-- rejoin %s to T1 refused for stale counters: %s", back, strings.Join(named, "; "))
		return
	}
	if err != nil || rep.Phase != topology.PhaseStable {
		s.Note("-- rejoin %s to T1: phase %s, %v", back, rep.Phase, err)
		return
	}
	s.Note("-- rejoin %s to T1: stable", back)
	inv := w.instance(ctx, o, s, w.cfg1, "T1")
	if inv == nil {
		return
	}
	r1 := orderPlan{ID: rejoinOrder, Items: []inventory.Item{{Route: "c", SKU: "s", Quantity: plan.qty}}}
	o.mu.Lock()
	o.atT1 = append(o.atT1, r1)
	o.mu.Unlock()
	// a client of its own (its own fates and crash), as o4's at T1
	s.Sub(ctx, "reserve-"+r1.ID+"@T1", func(ctx context.Context) {
		o.reserve(inv, "reserve-"+r1.ID+"@T1", r1, 2)(ctx)
		o.confirm(inv, "confirm-"+r1.ID+"@T1", r1.ID, 2)(ctx)
	})
}

// rejoinApply applies T1 from back under the schedule's faults, and when
// it returns migrating runs it again while an instance of T1 reconciles
// (rerunT2's reason: no apply settles the parts of a node that stays in
// the server, n1's and n2's of c with shrink). It returns the last
// apply's report and error.
func (w *World) rejoinApply(ctx context.Context, o *observed, s *Scheduler, who, back string) (topology.Report, error) {
	began := time.Now()
	rep, err := inventory.ApplyTopology(ctx, inventory.ApplyOptions{To: w.cfg1, From: w.config(back), Wait: 300 * time.Millisecond,
		Logger: discard, Faults: s})
	o.applied("T1", began, rep, err)
	o.note(who, fmt.Sprintf("topology apply T1 (rejoin from %s, phase %s)", back, rep.Phase), err)
	if err != nil || rep.Phase != topology.PhaseMigrating {
		return rep, err
	}
	inv := w.instance(ctx, o, s, w.cfg1, "T1")
	if inv == nil {
		return rep, err
	}
	s.Sub(ctx, "recon@T1", o.reconcile(inv, "recon@T1", 2))
	began = time.Now()
	rep, err = inventory.ApplyTopology(ctx, inventory.ApplyOptions{To: w.cfg1, From: w.config(back), Wait: 2 * time.Second,
		Logger: discard, Faults: s})
	o.applied("T1", began, rep, err)
	o.note(who, fmt.Sprintf("topology apply T1 again (rejoin from %s, phase %s)", back, rep.Phase), err)
	return rep, err
}

// healApply is the heal's apply (apply) as an operator runs it: when it
// is refused for stale counters (inventory.StaleCountersError: nothing
// written), it settles what is pending with an instance of T1 (it names
// every node), deletes the counters the refusal names, as the refusal
// says to (clearStale: none while a part pending on its node holds it),
// and applies again, up to three times.
func (w *World) healApply(ctx context.Context, o *observed, to string, wait time.Duration) error {
	for i := 0; ; i++ {
		err := w.apply(ctx, o, to, wait)
		var stale *inventory.StaleCountersError
		if i == 3 || !errors.As(err, &stale) {
			return err
		}
		if _, serr := w.settleT1(ctx, nil); serr != nil {
			return err
		}
		if cerr := w.clearStale(ctx, o, to, stale); cerr != nil {
			return fmt.Errorf("%w; the counters it names were not deleted: %v", err, cerr)
		}
	}
}

// clearStale deletes the counters stale names on their nodes, with the
// transfer records it names beside them (StaleCounter.Records), each
// only when no part pending or set aside on its node holds it (then an
// error names it, and nothing more is deleted), counted
// (observed.staleCleared) and noted. A stock hash the refusal says may
// be counted nowhere else (StaleCounter.NoneElsewhere) is deleted too,
// and its stock loaded again on the route, as the refusal asks an
// operator to do from the system of record (reload: seed 195213).
func (w *World) clearStale(ctx context.Context, o *observed, to string, stale *inventory.StaleCountersError) error {
	for _, f := range stale.Found {
		ns := w.readForDiff(ctx, f.Node)
		if ns == nil {
			return fmt.Errorf("node %s could not be read", f.Node)
		}
		for id, p := range ns.parts {
			if p.Counter == f.Key && p.State == inventory.PartPending {
				return fmt.Errorf("part %s pending on %s holds %s", id, f.Node, f.Key)
			}
		}
		if err := w.direct[f.Node].Del(ctx, append([]string{f.Key}, f.Records...)...).Err(); err != nil {
			return fmt.Errorf("deleting %s on %s: %w", f.Key, f.Node, err)
		}
		o.mu.Lock()
		o.staleCleared++
		o.mu.Unlock()
		o.note("heal", fmt.Sprintf("deleted %s on %s (%s; transfer records %v; none elsewhere: %v), refused as stale", f.Key, f.Node, f.Units, f.Records, f.NoneElsewhere), nil)
		if f.NoneElsewhere {
			err := w.reload(ctx, o, to, f)
			o.note("heal", fmt.Sprintf("loaded %s's stock (%s) again on a node of route %s, none elsewhere", f.Key, f.Units, f.Route), err)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// reload puts the units of stock hash f.Key that a stale-counter refusal
// of an apply to topology to said may be counted nowhere else
// (StaleCounter.NoneElsewhere), as the refusal named them, onto the
// first node, by name, of f.Route in the apply's previous topology (T1
// for an apply to T0 or T2; T2 or T0, as the schedule shrinks, for one
// to T1) but f.Node: the operator's reload of the SKU's stock from the
// system of record onto a node that serves the route before the change,
// whose step 3 then moves it as any counter. The explorer knows that
// record only as the deleted copy held it (the node's data as its loss
// left it: what the stock check's bound counts after that loss). Its
// available, confirmed and loaded units are added as they were (no
// reserved unit: clearStale deletes no hash a pending part holds), not
// recorded as a load (observed.loaded): the schedule loaded them before.
func (w *World) reload(ctx context.Context, o *observed, to string, f inventory.StaleCounter) error {
	from := "T1"
	if to == "T1" {
		o.mu.Lock()
		from = map[bool]string{true: "T2", false: "T0"}[o.shrink]
		o.mu.Unlock()
	}
	ms := slices.Sorted(slices.Values(w.config(from).Servers["inventory"].Routes[f.Route]))
	ms = slices.DeleteFunc(ms, func(m string) bool { return m == f.Node })
	if len(ms) == 0 {
		return fmt.Errorf("route %s has no node but %s at %s", f.Route, f.Node, from)
	}
	units := map[string]int64{}
	for _, part := range strings.Split(f.Units, ", ") {
		name, v, ok := strings.Cut(part, " ")
		if !ok {
			return fmt.Errorf("units of %s: %q", f.Key, f.Units)
		}
		units[name] = atoi(v)
	}
	if units["reserved"] != 0 {
		return fmt.Errorf("%s on %s holds %d units reserved", f.Key, f.Node, units["reserved"])
	}
	_, err := w.direct[ms[0]].TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, field := range []string{"available", "confirmed", "loaded"} {
			p.HIncrBy(ctx, f.Key, field, units[field])
		}
		p.HSetNX(ctx, f.Key, "reserved", 0)
		return nil
	})
	return err
}
