package explore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/rollback"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// The actors of a schedule and what the clients were told. An actor is
// one client call (or a short sequence) on one inventory instance; every
// script call it makes is scheduled (sched.go).

// orderPlan is one order of a schedule.
type orderPlan struct {
	ID    string
	User  string
	Items []inventory.Item
	TTL   time.Duration // 0: orderTTL
}

// observed is what the actors' callers were told, per order: the claims
// the final state must honour (check.go).
type observed struct {
	mu        sync.Mutex
	reserved  map[string][][]inventory.Receipt // Reserve answered success: each such answer's receipts, in the order they came
	confirmed map[string]string                // Confirm answered confirmed: by whom
	cancelled map[string]string                // Cancel answered cancelled: by whom
	// cancelFrom is when the first Cancel call of an order began,
	// whatever it answered (one whose reply was lost may have applied).
	cancelFrom map[string]time.Time
	dataLoss   map[string]bool // Confirm reported data loss
	// plans are the items each order was first reserved for, by order id
	// (checkConfirmed holds a confirmed record's stock parts to them).
	plans   map[string][]inventory.Item
	refused map[string][]refusal // Reserve calls refused for good
	// extra is stock loaded during the schedule, by stock key: the units
	// of the loads that answered success (min) and of every load tried
	// (max; a load whose outcome is unknown may have added any part of
	// its units: its shares go to the route's nodes one by one).
	extra map[string]loadRange
	// losses are the nodes the data-loss actor rolled back (loss.go),
	// and stockLosses, one per loss in the same order, what each did to
	// its node's loaded counts (checkStock's bounds); atT1 are the
	// orders the topology actor reserved (at T1, and its
	// moved order at T0: moved.go); problems
	// are violations an actor saw as it ran (kind: detail).
	losses      []string
	stockLosses []stockLoss
	atT1        []orderPlan
	// applies counts the topology applies run, retired the stale
	// records they retired, reinstalled the records they put back,
	// takenBack the counters they took back (applied); ran are those
	// whose writes may have begun (ran).
	applies, retired, reinstalled, takenBack int
	ran                                      []topoApply
	leftBehind                               map[string][]string // stock key → nodes a move forward left it on (noteLeftBehind)
	// rejoin counts the rejoin's applies (rejoin.go: rejoinStats), stale
	// the applies refused for stale counters and staleFound the counters
	// they named (applied), staleCleared those the heal deleted
	// (clearStale)
	rejoin                          rejoinStats
	stale, staleFound, staleCleared int
	// diffs is what each roll back took, by node (lossdiff.go; none for
	// a node whose state could not be read around it)
	diffs    map[string][]lossDiff
	routers  []*router.Router // made by actors (the topology actor's of T1)
	problems []string
	log      []string
	closer   []func() // run after the schedule's actors finished
	// bugs are the schedule's mutations, for the heal's applies
	// (heal.go, codeBugs); set before the actors start.
	bugs codeBugs
	// shrink says the topology actor drew a second apply to T2
	// (Options.Shrink), so the heal's last one goes there too (heal.go).
	// It says nothing of what ran: the actor may end before that apply,
	// or before the one of T1; the checks weigh the applies that ran
	// (observed.ran).
	shrink bool
	// died is told every Reserve's error (Scheduler.Died): an attempt
	// stopped at a fan-out crash point kills its actor only on return.
	died func(ctx context.Context, err error)
	// ended are the Reserve, Confirm and Cancel actors that returned, by
	// name (the data-loss actor's milestones: lossPlan.followReserve)
	ended map[string]bool
	// rejoinAfter names an actor the rejoin waits for before its picks
	// (a data-loss actor following it: followRejoin)
	rejoinAfter string
	// clockSlack is what the checks that compare times read on two
	// clocks allow (clock.go): twice the largest skew a node's clock had.
	clockSlack time.Duration
	// users are each order's user, by order id, as its first Reserve
	// actor was given it (the operator's system of record: operator.go)
	users map[string]string
	// operator says the schedule drew the operator actor
	// (Options.Operator): phase 2 starts one too. paidToken, set then,
	// reads the token of an order's confirmed record when a Confirm
	// answered confirmed, and paid holds it by order id ("" when it could
	// not be read); operated are the parts the operator settled, or may
	// have (its answer lost), as "node part id"; operators counts the
	// operator actors that ran and
	// stuckListed the parts their listings showed, healListed those the
	// heal's operator listed (tendAll).
	operators, stuckListed, healListed int
	// evicted are the part records the record-loss actor deleted
	// (operator.go, evict), tokens replaced by "T", and evictedOrders
	// their orders (exposed as a data loss's: the checks excuse their
	// per-order violations, but for the operator's settles)
	evicted       []string
	evictedOrders map[string]bool
	// synced are the rows the system of record holds of the parts the
	// record-loss actor deleted ("node part id": what each record held,
	// as pgsync synced it from the redo log before the loss)
	synced map[string]inventory.StuckUnits
	// confirmUnknown are the orders a Confirm of which ended with its
	// outcome unknown (its reply lost, its node unavailable): the
	// operator's system of record asks the order's record (decisionOf)
	confirmUnknown map[string]bool
	operator       bool
	paidToken      func(ctx context.Context, id string) string
	paid           map[string]string
	operated       []string
	// aside is what the set-aside actor hid (aside.go; nil: nothing),
	// expired the orders whose records it expired, with the system of
	// record's account of each, and verdicts counts what the operator's
	// settles met (asideVerdict)
	aside    *asideState
	expired  map[string]expiredOrder
	verdicts map[string]int
}

func newObserved() *observed {
	return &observed{reserved: map[string][][]inventory.Receipt{}, confirmed: map[string]string{},
		cancelled: map[string]string{}, cancelFrom: map[string]time.Time{}, dataLoss: map[string]bool{}, plans: map[string][]inventory.Item{}, refused: map[string][]refusal{}, extra: map[string]loadRange{},
		diffs: map[string][]lossDiff{}, ended: map[string]bool{}, users: map[string]string{}, paid: map[string]string{},
		evictedOrders: map[string]bool{}, confirmUnknown: map[string]bool{}, synced: map[string]inventory.StuckUnits{},
		expired: map[string]expiredOrder{}, verdicts: map[string]int{}}
}

// end records that actor who returned.
func (o *observed) end(who string) {
	o.mu.Lock()
	o.ended[who] = true
	o.mu.Unlock()
}

// waitEnded waits, as actor who, until the actor named returned: each
// wait is an idle pick (Scheduler.Idle: outside the fault budget) of
// 2 ms, which lets what no pick drives go on (an apply's wait), up to
// waitPicks of them.
func (o *observed) waitEnded(ctx context.Context, s *Scheduler, who, name string) {
	for i := 0; i < waitPicks && !o.hasEnded(name) && ctx.Err() == nil; i++ {
		s.Idle(ctx, who+" waits for "+name, 2*time.Millisecond)
	}
}

// waitPicks bounds each of waitEnded's waits.
const waitPicks = 300

// hasEnded reports whether the actor named returned.
func (o *observed) hasEnded(name string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ended[name]
}

// refusal is a Reserve call answered with a refusal for good (the order
// cannot be met: insufficient stock, a per-user limit): who made it,
// when it began (its first script call was let go: everything it read
// was read after that), and the answer.
type refusal struct {
	who   string
	start time.Time
	err   error
}

// refusedForGood reports whether err says the order is not reserved
// because it cannot be met (not that its outcome is unknown).
func refusedForGood(err error) bool {
	return errors.Is(err, inventory.ErrInsufficientStock) || errors.Is(err, inventory.ErrLimitExceeded)
}

// loadRange is how many units the schedule's loads of a SKU added
// during the schedule: at least min, at most max.
type loadRange struct{ min, max int64 }

// loaded records a load of qty units on key that answered err (not nil:
// its outcome is unknown, so it added from none to all of them).
func (o *observed) loaded(key string, qty int64, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.extra[key]
	if err == nil {
		r.min += qty
	}
	r.max += qty
	o.extra[key] = r
}

// lost records that node name went back to an older copy of its data,
// which changed its loaded counts as sl says.
func (o *observed) lost(name string, sl stockLoss) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.losses = append(o.losses, name)
	o.stockLosses = append(o.stockLosses, sl)
}

// diffed records what node name's roll back took.
func (o *observed) diffed(name string, d lossDiff) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.diffs[name] = append(o.diffs[name], d)
}

// problem records a violation an actor saw as it ran.
func (o *observed) problem(kind, format string, a ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.problems = append(o.problems, kind+": "+fmt.Sprintf(format, a...))
}

// closeLater runs fn once the schedule's actors finished.
func (o *observed) closeLater(fn func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closer = append(o.closer, fn)
}

// close runs the functions given to closeLater, last first.
func (o *observed) close() {
	o.mu.Lock()
	fns := o.closer
	o.closer = nil
	o.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

func (o *observed) note(who, what string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil {
		o.log = append(o.log, fmt.Sprintf("%s: %s: %v", who, what, err))
	} else {
		o.log = append(o.log, fmt.Sprintf("%s: %s: ok", who, what))
	}
}

// relimit is the limit order's operator (Options.Relimit): after waits
// picks of other calls it sets c/s's per-user limit to limit on inv, a
// limit change alone (LoadStock of 0 units), once; a change some node
// missed reaches it through the reconcilers (ConvergeLimits).
func (o *observed) relimit(inv *inventory.Inventory, s *Scheduler, waits int, limit int64) func(ctx context.Context) {
	return func(ctx context.Context) {
		s.Pass(ctx, "relimit", waits)
		_, err := inv.LoadStock(ctx, "c", "s", 0, limit)
		o.note("relimit", fmt.Sprintf("LoadStock c/s limit %d", limit), err)
	}
}

// reserve is a Reserve actor: as a client does, it calls Reserve again
// with the same order id (up to tries calls) while the outcome is unknown
// or the order is in progress.
func (o *observed) reserve(inv *inventory.Inventory, who string, p orderPlan, tries int) func(ctx context.Context) {
	return func(ctx context.Context) {
		defer o.end(who)
		o.mu.Lock()
		if o.plans[p.ID] == nil {
			o.plans[p.ID] = p.Items
			o.users[p.ID] = p.User
		}
		o.mu.Unlock()
		for i := 0; i < tries; i++ {
			cctx, sent := withFirstSend(ctx)
			ttl := p.TTL
			if ttl == 0 {
				ttl = orderTTL
			}
			res, err := inv.Reserve(cctx, p.ID, p.Items, p.User, ttl)
			o.note(who, "Reserve "+p.ID, err)
			if start := sent.time(); refusedForGood(err) && !start.IsZero() {
				o.mu.Lock()
				o.refused[p.ID] = append(o.refused[p.ID], refusal{who: who, start: start, err: err})
				o.mu.Unlock()
			}
			if o.died != nil {
				o.died(ctx, err)
			}
			if err == nil {
				o.mu.Lock()
				o.reserved[p.ID] = append(o.reserved[p.ID], res.Receipts)
				o.mu.Unlock()
				return
			}
			if errors.Is(err, inventory.ErrCrashed) ||
				!(errors.Is(err, inventory.ErrUnavailable) || errors.Is(err, inventory.ErrInProgress)) {
				return
			}
		}
	}
}

// confirm is a Confirm actor: it tries up to tries times while the order
// is in progress or not reserved yet.
func (o *observed) confirm(inv *inventory.Inventory, who, id string, tries int) func(ctx context.Context) {
	return func(ctx context.Context) {
		defer o.end(who)
		for i := 0; i < tries; i++ {
			_, err := inv.Confirm(ctx, id)
			o.note(who, "Confirm "+id, err)
			switch {
			case err == nil:
				o.mu.Lock()
				o.confirmed[id] = who
				o.mu.Unlock()
				o.learnPaid(ctx, id)
				return
			case errors.Is(err, inventory.ErrDataLoss):
				o.mu.Lock()
				o.dataLoss[id] = true
				o.mu.Unlock()
				o.learnPaid(ctx, id)
				return
			case errors.Is(err, inventory.ErrInProgress), errors.Is(err, inventory.ErrNotFound):
				continue
			}
			o.mu.Lock()
			o.confirmUnknown[id] = true
			o.mu.Unlock()
			return
		}
	}
}

// cancel is a Cancel actor.
func (o *observed) cancel(inv *inventory.Inventory, who, id string) func(ctx context.Context) {
	return func(ctx context.Context) {
		defer o.end(who)
		o.mu.Lock()
		if _, ok := o.cancelFrom[id]; !ok {
			o.cancelFrom[id] = time.Now()
		}
		o.mu.Unlock()
		out, err := inv.Cancel(ctx, id)
		o.note(who, "Cancel "+id, err)
		if err == nil && out.Status == inventory.StatusCancelled {
			o.mu.Lock()
			o.cancelled[id] = who
			o.mu.Unlock()
		}
	}
}

// reconcile is a reconciler actor: passes over every node.
func (o *observed) reconcile(inv *inventory.Inventory, who string, passes int) func(ctx context.Context) {
	return func(ctx context.Context) {
		defer o.end(who) // the set-aside actor's repair waits for it (aside.go)
		r := rollback.New(inv, nil, rollback.Settings{Logger: discard})
		for i := 0; i < passes; i++ {
			failed := r.RunOnce(ctx)
			o.note(who, fmt.Sprintf("reconcile pass %d (%d failed)", i+1, failed), nil)
		}
	}
}

// topologyPlan is the membership actor's draws: its order and user at
// T1, and how many picks of other calls pass before each apply (drawn
// in half the schedules for the first, three in ten for the second: a
// pause before the removal lets the order at T1 end first, and the
// races of its commit with the removal need none).
type topologyPlan struct {
	order, user string
	// before is the picks before the apply of T1: the orders of phase 1
	// (whose instances know T0 only) may reserve first, and the apply
	// then moves their records (an order homed elsewhere at T1) rather
	// than refuse them all from the start.
	before int
	// between is the picks between T1 stable and the apply of T0: the
	// data-loss actor may roll a node back and see it accepted while a
	// record it lost lives away from it, before the apply of T0 moves
	// the record back.
	between int
	// moved, with decide, is the moved order (moved.go): reserved at T0
	// before the apply of T1, decided at T1 once that apply returned (after
	// o4's Reserve when T1 is stable), as decide says (decideNone: no
	// moved order); movedHome is its home at T0.
	moved     orderPlan
	movedHome string
	decide    decision
	// shrink (Options.Shrink): the second apply goes to T2, not back to
	// T0: n4 leaves the server and n3 route c only, both in one apply.
	shrink bool
	// rejoin (Options.Rejoin): once the second apply returned, T1 again
	// (rejoin.go).
	rejoin rejoinPlan
}

// topology is the membership actor: topology apply adds n4 (T1); once
// T1 is applied, an instance of T1 loads stock of route c (some of it on
// n4) and a Reserve actor of order o4 of user starts on it (a one-round
// order may promise a part on n4); then topology apply removes n4 again (T0),
// with o4's reservation and n4's stock to move or decide. Each apply
// first waits the picks plan draws for it. With a moved order
// (plan.decide; moved.go) the actor reserves it before the apply of T1
// and decides it at T1, so the removal carries its decision back. With
// plan.shrink the removal goes to T2 instead: n4 leaves the server and
// n3 leaves route c but stays for route d, so c's units on both (and the
// parts of c's orders on n3, which the new instances' reconcilers settle:
// no apply settles a node that stays) move to c's new nodes. With
// plan.rejoin, once both applies returned, T1 is applied again
// (rejoin.go).
func (w *World) topology(o *observed, s *Scheduler, who string, plan topologyPlan) func(ctx context.Context) {
	return func(ctx context.Context) {
		back := "T0" // the second apply's topology
		if plan.shrink {
			back = "T2"
		}
		for _, to := range []string{"T1", back} {
			picks := plan.before
			if to != "T1" {
				picks = plan.between
			}
			s.Pass(ctx, who, picks)
			if to == "T1" && plan.decide != decideNone {
				w.reserveMoved(ctx, o, s, plan.moved)
			}
			// The removal waits past o4's deadline (its parts on n4 hold
			// the stock there until they settle), so it moves n4's stock
			// itself, under the schedule's faults.
			wait, from := 2*time.Second, w.cfg1
			if to == "T1" {
				wait, from = 300*time.Millisecond, w.cfg0
			}
			began := time.Now()
			rep, err := inventory.ApplyTopology(ctx, inventory.ApplyOptions{To: w.config(to), From: from, Wait: wait,
				Logger: discard, Faults: s})
			o.applied(to, began, rep, err)
			o.note(who, fmt.Sprintf("topology apply %s (phase %s)", to, rep.Phase), err)
			if err != nil {
				return
			}
			if to == "T1" {
				w.atT1(ctx, o, s, plan, rep.Phase == topology.PhaseStable)
			}
			if to == "T2" && rep.Phase == topology.PhaseMigrating {
				w.rerunT2(ctx, o, s, who)
			}
		}
		if plan.rejoin.on {
			w.rejoin(ctx, o, s, who, back, plan.rejoin)
		}
	}
}

// rerunT2 is the operator's rerun of an apply of T2 that ended migrating:
// c's parts on n3, which stays in the server, hold c's stock there, and
// no apply settles the parts of a node that stays. An instance of T1 (it
// names every node of T1 and T2, as the instances running during a
// removal do) reconciles them, as a client of the topology actor's own (a
// sub-actor, with its own fates), while the apply of T2 runs again and
// moves the stock once they settled.
func (w *World) rerunT2(ctx context.Context, o *observed, s *Scheduler, who string) {
	inv := w.instance(ctx, o, s, w.cfg1, "T1")
	if inv == nil {
		return
	}
	s.Sub(ctx, "recon@T1", o.reconcile(inv, "recon@T1", 2))
	began := time.Now()
	rep, err := inventory.ApplyTopology(ctx, inventory.ApplyOptions{To: w.cfg2, From: w.cfg1, Wait: 2 * time.Second,
		Logger: discard, Faults: s})
	o.applied("T2", began, rep, err)
	o.note(who, fmt.Sprintf("topology apply T2 again (phase %s)", rep.Phase), err)
}

// atT1 makes an instance of T1 once the apply of T1 returned without an
// error; when T1 is stable, it loads 4 units of c/s over n3 and n4
// (set-up: not scheduled) and reserves order plan.order of plan.user on
// it; then it decides the moved order on it as plan.decide says (in phase
// migrating too: the apply moves order records before the counters it may
// still be waiting for). All as part of the topology actor: the removal
// of n4 that follows races o4's background commit, and carries the moved
// order's decision back to its T0 home.
func (w *World) atT1(ctx context.Context, o *observed, s *Scheduler, plan topologyPlan, stable bool) {
	if !stable && plan.decide == decideNone {
		return
	}
	inv := w.instance(ctx, o, s, w.cfg1, "T1")
	if inv == nil {
		return
	}
	if stable {
		w.reserveAtT1(ctx, o, s, inv, plan.order, plan.user)
	}
	decideMoved(ctx, o, s, inv, plan.moved.ID, plan.decide)
}

// reserveAtT1 loads 4 units of c/s over n3 and n4 (set-up: not
// scheduled) and reserves order o4 of user on inv, an instance of T1.
func (w *World) reserveAtT1(ctx context.Context, o *observed, s *Scheduler, inv *inventory.Inventory, order, user string) {
	lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // no actor: not scheduled
	defer cancel()
	_, err := inv.LoadStock(lctx, "c", "s", 4, -1)
	o.note("topology", "LoadStock c/s 4 at T1", err)
	o.loaded(inventory.StockKey("c", "s"), 4, err)
	o4 := orderPlan{ID: order, User: user, Items: []inventory.Item{{Route: "a", SKU: "s", Quantity: 1}, {Route: "c", SKU: "s", Quantity: 2}}}
	o.mu.Lock()
	o.atT1 = append(o.atT1, o4)
	o.mu.Unlock()
	// A client of its own (its own fates and crash): its attempt may die
	// at a crash point and leave the removal of n4 its staging record.
	s.Sub(ctx, "reserve-"+order+"@T1", o.reserve(inv, "reserve-"+order+"@T1", o4, 1))
}

// restart is the node-restart actor: kill -9 one node and start it again
// from its AOF, as one scheduled step.
func (w *World) restart(o *observed, s *Scheduler, who, name string) func(ctx context.Context) {
	return func(ctx context.Context) {
		err := s.Step(ctx, "restart "+name, func() error { return w.Restart(name) })
		o.note(who, "restart "+name+" from its AOF", err)
	}
}
