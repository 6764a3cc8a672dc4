package explore

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shardis/shardis/inventory"
)

var discard = slog.New(slog.DiscardHandler)

// scheduleLimit bounds one schedule (see RunSchedule).
const scheduleLimit = 2 * time.Minute

// stockPerSKU is what each schedule loads on every route.
const stockPerSKU = 10

// The SKUs of a schedule: one per route (route c is limited per user).
var skus = []skuPlan{{"a", "s", 0}, {"b", "s", 0}, {"c", "s", 6}}

type skuPlan struct {
	Route, SKU string
	Limit      int64
}

// RunSchedule runs the schedule of seed: reset, load, the actors under a
// scheduler, the wait for deadlines with the reconcilers as actors, a
// fault-free heal, and the checks. An error is the world failing (a node
// that does not come back), not a violation.
func (w *World) RunSchedule(ctx context.Context, seed int64, opts Options) (Result, error) {
	opts = opts.withDefaults()
	if opts.Clock > 0 && w.clock.files == nil {
		return Result{Seed: seed}, fmt.Errorf("explore: Options.Clock is %g, but the world's nodes read the machine's clock (make it with the clock skew library: Explore does when Config.Options.Clock is above 0)", opts.Clock)
	}
	// A watchdog: past it every actor's waiting call fails with the
	// context's error, so a schedule that cannot end still ends.
	ctx, cancel := context.WithTimeout(ctx, scheduleLimit)
	defer cancel()
	start := time.Now()
	res := Result{Seed: seed}
	if err := w.Reset(ctx); err != nil {
		return res, err
	}
	healer, err := inventory.New(w.healR, inventory.Options{Logger: discard})
	if err != nil {
		return res, err
	}
	for _, k := range skus {
		if _, err := healer.LoadStock(ctx, k.Route, k.SKU, stockPerSKU, k.Limit); err != nil {
			return res, fmt.Errorf("explore: loading %s/%s: %w", k.Route, k.SKU, err)
		}
	}
	probs, err := opts.probs()
	if err != nil {
		return res, err
	}
	if opts.Abandon > 0 {
		probs.Abandon = opts.Abandon
	}
	s := NewScheduler(seed, probs, opts.Mutations)
	if s.carryWait < 0 {
		s.Note("-- one-round commits: each sent by itself")
	} else {
		s.Note("-- one-round commits: riding the next write call on their home node, or sent at Close")
	}
	insts := make([]*inventory.Inventory, len(w.routers))
	for i, r := range w.routers {
		if insts[i], err = inventory.New(r, inventory.Options{Logger: discard, Faults: s, AttemptLease: attemptLease, GroupCommit: 1, CarryWait: s.carryWait}); err != nil {
			return res, err
		}
	}
	obs := newObserved()
	obs.died = s.Died
	obs.bugs = codeBugs(s.mutations)
	t0 := time.Now()
	orders := w.phase1(ctx, s, obs, insts, opts)
	t1 := time.Now()
	waited := w.phase2(ctx, s, obs, insts, orders, opts)
	s.Wait()
	for _, inv := range insts {
		inv.Close()
	}
	obs.close()
	if err := w.resetClocks(); err != nil {
		return res, err
	}
	if err := w.unhide(ctx, obs); err != nil {
		return res, err
	}
	if err := w.liftMemoryLimits(ctx); err != nil {
		return res, err
	}
	t2 := time.Now()
	healWait, topoProblem, err := w.heal(ctx, obs, healer)
	s.Note("-- set-up %s, phase 1 %s, phase 2 %s, heal %s", t0.Sub(start).Round(time.Millisecond),
		t1.Sub(t0).Round(time.Millisecond), t2.Sub(t1).Round(time.Millisecond), time.Since(t2).Round(time.Millisecond))
	if err != nil {
		return res, err
	}
	res.Waited = waited + healWait
	at, _, err := w.topologyNow(ctx) // the topology the schedule ended at (checkStranded)
	if err != nil {
		return res, err
	}
	st, err := w.read(ctx)
	if err != nil {
		return res, err
	}
	if topoProblem != "" {
		res.Violations = append(res.Violations, "topology-migrating: "+topoProblem)
	}
	obs.mu.Lock()
	res.Violations = append(res.Violations, obs.problems...)
	view := w.exposure(obs, slices.Concat(orders, obs.atT1))
	for id := range obs.evictedOrders { // a record-loss actor's: operator.go
		view.exposed[id] = true
	}
	for id := range obs.expired { // its record lived out its retention: aside.go
		view.exposed[id] = true
		view.records[id] = true
	}
	lostRoutes, split := w.ranView(obs)
	view.lostRoutes = lostRoutes
	lost := slices.Clone(obs.losses)
	obs.mu.Unlock()
	promisedAcross(st, lost, w.incarnations(ctx, lost), view.exposed)
	found, excused := check(st, obs, orders, w.homes, topoView{routes: w.config(at).Servers["inventory"].Routes, split: split}, view)
	res.Violations, res.Excused, res.Lost = append(res.Violations, found...), len(excused), slices.Clone(obs.losses)
	res.Applies, res.Retired, res.Reinstalled, res.TakenBack = obs.applies, obs.retired, obs.reinstalled, obs.takenBack
	res.Rejoins, res.RejoinStable, res.RejoinRefused, res.RejoinInvalid = obs.rejoin.ran, obs.rejoin.stable, obs.rejoin.refused, obs.rejoin.invalid
	res.Stale, res.StaleFound, res.StaleCleared = obs.stale, obs.staleFound, obs.staleCleared
	res.Operators, res.StuckListed, res.Operated, res.HealListed, res.Evicted = obs.operators, obs.stuckListed, len(obs.operated), obs.healListed, len(obs.evicted)
	res.Expired, res.Verdicts = len(obs.expired), maps.Clone(obs.verdicts)
	for _, e := range obs.expired {
		if e.confirmed {
			res.ExpiredPaid++
		}
	}
	for _, ns := range st.nodes {
		res.Frozen += ns.frozen
	}
	for _, e := range excused {
		s.Note("-- excused (%s lost acknowledged writes): %s", strings.Join(obs.losses, ", "), e)
	}
	res.Trace, res.Log, res.Digest = s.Trace(), obs.log, s.Digest()
	res.Took = time.Since(start)
	return res, nil
}

// phase1 draws the schedule's actors and runs them: a Reserve attempt, a
// concurrent retry of the same order on the other instance, Confirm and
// Cancel, a second order, the topology actor and a node restart.
func (w *World) phase1(ctx context.Context, s *Scheduler, obs *observed, insts []*inventory.Inventory, opts Options) []orderPlan {
	o1 := orderPlan{ID: "o1", User: "u", Items: []inventory.Item{
		{Route: "a", SKU: "s", Quantity: 1}, {Route: "b", SKU: "s", Quantity: 2}, {Route: "c", SKU: "s", Quantity: 3}}}
	o2 := orderPlan{ID: "o2", User: "u", Items: []inventory.Item{
		{Route: "c", SKU: "s", Quantity: 4}, {Route: "a", SKU: "s", Quantity: 1}}}
	orders := []orderPlan{o1}
	i := func() *inventory.Inventory { return insts[s.Intn(len(insts))] }
	s.Go(ctx, "reserve-o1@i0", obs.reserve(insts[0], "reserve-o1@i0", o1, 2))
	if s.Chance(0.7) {
		s.Go(ctx, "retry-o1@i1", obs.reserve(insts[1], "retry-o1@i1", o1, 3))
	}
	if s.Chance(0.6) {
		s.Go(ctx, "confirm-o1", obs.confirm(i(), "confirm-o1", "o1", 3))
	}
	if s.Chance(0.35) {
		s.Go(ctx, "cancel-o1", obs.cancel(i(), "cancel-o1", "o1"))
	}
	if s.Chance(0.4) {
		orders = append(orders, o2)
		s.Go(ctx, "reserve-o2", obs.reserve(i(), "reserve-o2", o2, 2))
		if s.Chance(0.5) {
			s.Go(ctx, "confirm-o2", obs.confirm(i(), "confirm-o2", "o2", 2))
		}
	}
	if s.Chance(0.4) {
		// Another order holds most of route b's stock for a while: o1's
		// attempts may find it short (a failed record), then find it back.
		o5 := orderPlan{ID: "o5", Items: []inventory.Item{{Route: "b", SKU: "s", Quantity: stockPerSKU - 1}}}
		orders = append(orders, o5)
		by := i() // drawn here: the generator is the scheduler's, not the actor's
		s.Go(ctx, "hold-o5", func(ctx context.Context) {
			obs.reserve(by, "hold-o5", o5, 1)(ctx)
			obs.cancel(by, "hold-o5", "o5")(ctx)
		})
	}
	if opts.Inline > 0 && s.Chance(opts.Inline) {
		// An order of one item homed on its stock's node (route b, n2):
		// the local path reserves it with an inline part
		// (inventory/inline.go), which a retry, a Confirm, a Cancel, the
		// reconcilers (phase 2) or the topology actor's move of its
		// record may meet at any step. Half of them have a user (n2 is
		// its quota node too): a quota part with its record beside the
		// inline stock part (the plan's path, not take_one).
		o9 := orderPlan{ID: w.inlineOrder(s.Chance(0.5)), Items: []inventory.Item{{Route: "b", SKU: "s", Quantity: 1}}}
		if s.Chance(0.5) {
			o9.User = "u9"
		}
		orders = append(orders, o9)
		s.Go(ctx, "reserve-"+o9.ID, obs.reserve(i(), "reserve-"+o9.ID, o9, 2))
		if s.Chance(0.4) {
			s.Go(ctx, "retry-"+o9.ID, obs.reserve(i(), "retry-"+o9.ID, o9, 2))
		}
		switch s.Intn(3) { // or neither: the reconcilers expire it
		case 0:
			s.Go(ctx, "confirm-"+o9.ID, obs.confirm(i(), "confirm-"+o9.ID, o9.ID, 2))
		case 1:
			s.Go(ctx, "cancel-"+o9.ID, obs.cancel(i(), "cancel-"+o9.ID, o9.ID))
		}
	}
	if opts.Limit > 0 && s.Chance(opts.Limit) {
		// An order of one limited SKU (4 of c/s, limit 6) for user u, in
		// half of them with 1 of a/s for user v, and a retry of it on the other
		// instance: the first attempt's quota may be what refuses the
		// retry (inventory's limitMayBeOwn, or its reads' fence) while its
		// stage, to a home other than the quota node n3, is late.
		o6 := orderPlan{ID: awayFrom(w.homes, "n3", "o6", "o8", "o10"), User: "u", Items: []inventory.Item{{Route: "c", SKU: "s", Quantity: 4}}}
		late := 0
		if s.Chance(0.5) {
			// and 1 of a/s, for user v (whose quota no other order
			// takes): its quota parts on n1 and n3, so each attempt reads
			// first (inventory's spreadQuotas), and a retry that reads
			// the first attempt's quota is refused behind a fence; its
			// home n2 stages no part of it, so the takes may all land
			// while the stage is late. The first attempt's reads and
			// takes are five calls: the retry starts three to eight
			// steps late.
			o6 = orderPlan{ID: homedOn(w.homes, "n2", "o6", "o8", "o10", "o11", "o12", "o13"), User: "v", Items: []inventory.Item{
				{Route: "c", SKU: "s", Quantity: 4}, {Route: "a", SKU: "s", Quantity: 1}}}
			late = 3 + s.Intn(6)
		}
		orders = append(orders, o6)
		s.Go(ctx, "reserve-o6@i0", obs.reserve(insts[0], "reserve-o6@i0", o6, 2))
		retry := obs.reserve(insts[1], "retry-o6@i1", o6, 2)
		s.Go(ctx, "retry-o6@i1", func(ctx context.Context) {
			s.Pass(ctx, "retry-o6@i1", late)
			retry(ctx)
		})
		if opts.Relimit > 0 && s.Chance(opts.Relimit) {
			// on the retry's instance: the change marks its limit hint,
			// so the retry reads first (inventory's spreadQuotas)
			s.Go(ctx, "relimit", obs.relimit(insts[1], s, s.Intn(6), int64(2+s.Intn(2))))
		}
	}
	var moved topologyPlan // the topology actor's moved order, if any
	var topo topologyPlan  // the topology actor's draws, if any
	twinned := false       // an actor a twin can race: the topology or data-loss actor
	if s.Chance(opts.Topology) {
		// The order reserved at T1: its home at T1 is n4, n1 or n2, and
		// its route c item goes first to its user's quota node, n3 or
		// n4, so its one-round attempt may stage away from n4 and
		// promise a part on n4, the node the topology actor then removes.
		plan := topologyPlan{order: t1Orders[s.Intn(len(t1Orders))], user: t1Users[s.Intn(len(t1Users))]}
		if s.Chance(0.5) {
			plan.before = s.Intn(16)
		}
		if s.Chance(0.3) {
			plan.between = s.Intn(16)
		}
		if opts.Moved > 0 && s.Chance(opts.Moved) {
			plan.moved, plan.movedHome = w.movedPlan(s.Intn(len(movedOrders)))
			plan.decide = decideConfirm + decision(s.Intn(2))
			moved = plan
		}
		if opts.Shrink > 0 && s.Chance(opts.Shrink) {
			plan.shrink = true
			obs.mu.Lock()
			obs.shrink = true // where the heal goes; the checks weigh what ran (observed.ran)
			obs.mu.Unlock()
		}
		plan.rejoin = drawRejoin(s, opts.Rejoin) // draws nothing when 0: other seeds run as before
		topo = plan
		s.Go(ctx, "topology", w.topology(obs, s, "topology", plan))
		twinned = true
	}
	if opts.Clock > 0 && s.Chance(opts.Clock) {
		s.Go(ctx, "clock", w.clockActor(obs, s, "clock", drawClock(s, opts.ClockStep)))
	}
	if opts.OOM > 0 && s.Chance(opts.OOM) {
		s.Go(ctx, "oom", w.oomActor(obs, s, "oom", drawOOM(s)))
	}
	if s.Chance(opts.Restart) {
		name := nodesT0[s.Intn(len(nodesT0))]
		s.Go(ctx, "restart", w.restart(obs, s, "restart", name))
	}
	var losses []string // the data-loss actors started (the operator may wait for them)
	if opts.Loss > 0 && s.Chance(opts.Loss) {
		plan := lossPlan{node: nodesT0[s.Intn(len(nodesT0))], before: s.Intn(6), held: 1 + s.Intn(30), out: s.Intn(8)}
		if moved.decide != decideNone && s.Chance(0.5) { // drawn only then: other seeds run as before
			plan.node = moved.movedHome
			plan.followReserve, plan.followDecide = movedReserver(moved.moved.ID), movedDecider(moved.moved.ID, moved.decide)
			plan.before, plan.held = 0, s.Intn(4)
		}
		plan = followRejoin(s, obs, topo, plan) // draws only with a rejoin from T2: other seeds run as before
		if plan.followReserve == "" && s.Chance(0.5) {
			plan.snap = w.startCopy(ctx, obs, "loss", plan.node)
		}
		s.Go(ctx, "loss", w.loss(obs, s, "loss", plan))
		twinned = true
		losses = append(losses, "loss")
		if opts.Loss2 > 0 && s.Chance(opts.Loss2) {
			w.secondLoss(ctx, obs, s, plan.node)
			losses = append(losses, "loss2")
		}
	}
	if twinned && opts.Twin > 0 && s.Chance(opts.Twin) {
		s.Go(ctx, "twin", w.twin(obs, s, "twin", s.Intn(40)))
	}
	if opts.Operator > 0 && s.Chance(opts.Operator) {
		obs.mu.Lock()
		obs.operator, obs.paidToken = true, w.paidToken
		obs.mu.Unlock()
		plan := drawOperator(s, len(insts), losses)
		s.Go(ctx, "operator", w.operator(obs, s, "operator", insts[plan.inst], plan))
		if s.Chance(0.5) {
			s.Go(ctx, "evict", w.evict(obs, s, "evict", drawEvict(s)))
		}
		if opts.Aside > 0 && len(losses) == 0 && s.Chance(opts.Aside) {
			// drawn only then: other seeds run as before; not with a data
			// loss, whose roll back would weigh a hidden hash as lost units
			plan := drawAside(s)
			s.Go(ctx, "hide", w.hideHash(obs, s, "hide", insts[plan.inst], plan))
		}
	}
	s.Run()
	return orders
}

// awayFrom returns the first of ids whose home is not node.
func awayFrom(homes *inventory.Homes, node string, ids ...string) string {
	for _, id := range ids {
		if homes.Home(id) != node {
			return id
		}
	}
	panic("explore: every id's home is " + node)
}

// homedOn returns the first of ids whose home is node.
func homedOn(homes *inventory.Homes, node string, ids ...string) string {
	for _, id := range ids {
		if homes.Home(id) == node {
			return id
		}
	}
	panic("explore: no id's home is " + node)
}

// inlineOrder is the id of phase1's inline-part order: homed on n2 at T0,
// and at T1 on another node when moving (the topology actor then moves
// its record away, and back).
func (w *World) inlineOrder(moving bool) string {
	for i := 1; i <= 100; i++ {
		id := fmt.Sprintf("p%d", i)
		if w.homes.Home(id) == "n2" && (w.homes1.Home(id) != "n2") == moving {
			return id
		}
	}
	panic(fmt.Sprintf("explore: no id of p1..p100 homed on n2 at T0 (moving at T1: %v)", moving))
}

// isInlineOrder reports whether id is one inlineOrder returns.
func isInlineOrder(id string) bool { return strings.HasPrefix(id, "p") }

// t1Orders are the ids the topology actor's order may have (homes at T1:
// n4, n1, n2).
var t1Orders = []string{"o4", "o7", "o9"}

// t1Users are the users the topology actor's order may have (quota nodes
// of route c at T1: n3, n4). An order with a user asks its user's quota
// node first (inventory's itemCandidates).
var t1Users = []string{"u4", "u6"}

// phase2 waits until every part still pending is past its deadline, then
// runs the reconciler on both instances, with a late Confirm and a late
// retry sometimes, and, in schedules that may have the data-loss actor,
// a late Cancel or Confirm of the inline-part order sometimes (its record
// may have moved away and back around a loss of its part: loss.go), under
// the same scheduler. It returns the time waited.
func (w *World) phase2(ctx context.Context, s *Scheduler, obs *observed, insts []*inventory.Inventory, orders []orderPlan, opts Options) time.Duration {
	_, latest, n, err := w.pendingSpan(ctx)
	parked := s.Parked()
	if (err != nil || n == 0) && !parked {
		return 0
	}
	start := time.Now()
	time.Sleep(time.Until(latest) + 20*time.Millisecond)
	waited := time.Since(start)
	s.NextPhase()
	s.Note("-- phase 2: %d parts pending, waited %s for their deadlines", n, waited.Round(time.Millisecond))
	if s.Chance(0.5) {
		// Another order takes what the reconcilers return, and confirms.
		o3 := orderPlan{ID: "o3", Items: []inventory.Item{{Route: "b", SKU: "s", Quantity: stockPerSKU - 2}}}
		s.Go(ctx, "reserve-o3", func(ctx context.Context) {
			obs.reserve(insts[1], "reserve-o3", o3, 2)(ctx)
			obs.confirm(insts[1], "confirm-o3", "o3", 2)(ctx)
		})
	}
	s.Go(ctx, "recon@i0", obs.reconcile(insts[0], "recon@i0", 2))
	s.Go(ctx, "recon@i1", obs.reconcile(insts[1], "recon@i1", 2))
	if s.Chance(0.5) {
		s.Go(ctx, "late-confirm-o1", obs.confirm(insts[s.Intn(len(insts))], "late-confirm-o1", "o1", 3))
	}
	if opts.Loss > 0 { // drawn only then: other seeds run as before
		for _, o := range orders {
			if !isInlineOrder(o.ID) || !s.Chance(0.5) {
				continue
			}
			inv := insts[s.Intn(len(insts))]
			if s.Chance(0.5) {
				s.Go(ctx, "late-cancel-"+o.ID, obs.cancel(inv, "late-cancel-"+o.ID, o.ID))
			} else {
				s.Go(ctx, "late-confirm-"+o.ID, obs.confirm(inv, "late-confirm-"+o.ID, o.ID, 2))
			}
		}
	}
	if s.Chance(0.2) {
		o1 := orderPlan{ID: "o1", User: "u", Items: []inventory.Item{
			{Route: "a", SKU: "s", Quantity: 1}, {Route: "b", SKU: "s", Quantity: 2}, {Route: "c", SKU: "s", Quantity: 3}}}
		s.Go(ctx, "late-retry-o1", obs.reserve(insts[s.Intn(len(insts))], "late-retry-o1", o1, 2))
	}
	obs.mu.Lock()
	operator, aside := obs.operator, obs.aside
	obs.mu.Unlock()
	if aside != nil { // the set-aside actor hid a hash: aside.go
		s.Go(ctx, "repair", w.repairHash(obs, s, "repair", insts[s.Intn(len(insts))], aside))
	}
	if operator { // drawn only then: other seeds run as before
		plan := drawOperator(s, len(insts), nil)
		s.Go(ctx, "operator2", w.operator(obs, s, "operator2", insts[plan.inst], plan))
	}
	s.Run()
	return waited
}
