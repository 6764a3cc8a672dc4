package explore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shardis/shardis/inventory"
)

// The operator actor (Options.Operator): while the other actors run, an
// operator tends the parts set aside on the nodes as README's stuck-parts
// section tells one to, through an inventory instance of the schedule
// (its script calls scheduled and faulted like any actor's: a settle's
// reply may be lost, the operator may die). At each of its rounds, after
// a drawn number of picks of other calls (in phase 1, in half the
// schedules with a data-loss actor, once that actor ended), it lists the
// stuck parts of n1..n3 (`shardis parts stuck`, one scheduled step) and,
// for each:
//
//   - a part whose own record is gone (listed PartMissing, or a tombstone
//     written over it: cancelled with no units): `shardis parts settle
//     --route R --sku S --qty N [--user U]` (SettleStuckLost) with what
//     the system of record holds of it (lostUnits);
//   - any other part: `shardis parts settle NODE PART confirm|cancel`
//     (SettleStuck), and when that is refused as not the operator's
//     (ErrPrecondition: the order's record exists, the part is no longer
//     set aside, an entry left behind a settle) `shardis parts retry`
//     (RetryStuck), as the refusal says.
//
// A settle whose outcome is unknown (its reply lost, its node
// unavailable) is run again, up to operatorTries, as an operator re-runs
// a command that failed: the re-run must meet the part settled and be
// refused. The heal runs the same procedure, unfaulted, before each of
// its retries (heal.go, settleAll).
//
// The explorer plays the system of record: it knows each order's items
// and user (observed.plans, users), the units a Reserve's receipts said
// a node took for an item, the row of each part whose record the
// record-loss actor deleted, as synced before (observed.synced: route,
// SKU, units, user), and the attempt a Confirm answered confirmed for
// (observed.paid). The decision is SettleStuckLost's doc's (decisionOf):
// confirm a part only when its order was paid by the part's attempt (the
// token in its id), else cancel; a confirmed order whose confirmed
// attempt is unknown leaves its parts to the heal.
//
// The record-loss actor (evict, in half the schedules with the operator)
// deletes one or two pending part records of a node while its pending
// index still lists them, as an eviction or a lost key would: such a
// part settles by nothing but the operator. Its orders are exposed as a
// data loss's are (their per-order violations excused: the loss may fail
// an order whose Reserve was acknowledged, or make a Confirm report data
// loss); the node-level checks (stock and quota counters against their
// parts, nothing settled twice, the per-user limit, nothing left set
// aside) hold as ever, and so does the state of every part the operator
// settled: one that contradicts its order's decided record is a
// violation ("operator-decision") that nothing excuses but a node's data
// loss that took that record (another node rolled back past the
// decision, as the data-loss actor does): the record read at the end is
// then the loss's, not the decision the operator settled by (seed 175273:
// a Confirm landed, the home went back to a copy from before the order,
// and the reconcilers decided the record found by its parts failed).

// operatorPlan is an operator actor's draws: the instance it acts
// through, the actors it waits for first (the data-loss actors, in half
// the schedules that have them: what a loss leaves to an operator shows
// once its node is accepted) and the picks of other calls before each of
// its rounds.
type operatorPlan struct {
	inst   int
	after  []string
	rounds []int
}

// drawOperator draws an operator's plan for insts instances, losses the
// data-loss actors started: 1 to 3 rounds, each after 0 to 29 picks.
func drawOperator(s *Scheduler, insts int, losses []string) operatorPlan {
	p := operatorPlan{inst: s.Intn(insts)}
	if len(losses) > 0 && s.Chance(0.5) {
		p.after = losses
	}
	for range 1 + s.Intn(3) {
		p.rounds = append(p.rounds, s.Intn(30))
	}
	return p
}

// operator is the operator actor of plan, acting through inv.
func (w *World) operator(o *observed, s *Scheduler, who string, inv *inventory.Inventory, plan operatorPlan) func(ctx context.Context) {
	return func(ctx context.Context) {
		o.mu.Lock()
		o.operators++
		o.mu.Unlock()
		for _, name := range plan.after {
			o.waitEnded(ctx, s, who, name)
		}
		for i, wait := range plan.rounds {
			s.Pass(ctx, who, wait)
			var parts []inventory.StuckPart
			err := s.Step(ctx, fmt.Sprintf("%s lists stuck parts (round %d)", who, i+1), func() error {
				var errs []error
				parts, errs = listStuck(ctx, inv, nodesT0)
				return errors.Join(errs...)
			})
			o.note(who, fmt.Sprintf("parts stuck: %d listed", len(parts)), err)
			o.mu.Lock()
			o.stuckListed += len(parts)
			o.mu.Unlock()
			if errors.Is(err, inventory.ErrCrashed) {
				return
			}
			for _, p := range parts {
				if !w.tend(ctx, o, inv, who, p) {
					return
				}
			}
		}
	}
}

// listStuck lists the parts set aside on nodes (StuckParts), and the
// errors of the nodes it could not list.
func listStuck(ctx context.Context, inv *inventory.Inventory, nodes []string) (parts []inventory.StuckPart, errs []error) {
	for _, name := range nodes {
		ps, err := inv.StuckParts(ctx, name, 1000)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		parts = append(parts, ps...)
	}
	return parts, errs
}

// tendAll is the heal's operator (a schedule with the operator actor):
// the operator's procedure for every part set aside on the nodes inv
// names, unscheduled and unfaulted, before the heal's retry.
func (w *World) tendAll(ctx context.Context, o *observed, inv *inventory.Inventory) {
	var names []string
	for _, name := range allNodes {
		if _, err := inv.StuckCount(ctx, name); err == nil {
			names = append(names, name)
		}
	}
	parts, _ := listStuck(ctx, inv, names)
	o.mu.Lock()
	o.healListed += len(parts)
	o.mu.Unlock()
	for _, p := range parts {
		w.tend(ctx, o, inv, healOperator, p)
	}
}

// tend follows the documented procedure for one part set aside; it
// reports false when the operator died.
func (w *World) tend(ctx context.Context, o *observed, inv *inventory.Inventory, who string, p inventory.StuckPart) bool {
	what := p.Node + " " + tokenRE.ReplaceAllString(p.PartID, "|T|")
	if strings.Contains(p.Reason, "cannot be inferred") {
		o.verdict("listed-gone") // set aside by the expiry's 'gone' verdict
	}
	if p.Problem != "" {
		o.note(who, "leave "+what+": its record cannot be read", errors.New(p.Problem))
		return true
	}
	if lostRecord(p) {
		u, action, why := o.lostUnits(ctx, p.Node, p.PartID)
		if why != "" {
			o.note(who, "leave "+what+": "+why, nil)
			return true
		}
		err := o.tries(who, p, func() (string, error) { return inv.SettleStuckLost(ctx, p.Node, p.PartID, action, u) },
			func(res string) string {
				return fmt.Sprintf("parts settle --route %s --sku %s --qty %d --user %q %s %s (%s)", u.Route, u.SKU, u.Quantity, u.User, what, action, res)
			})
		o.verdict(asideVerdict(true, err))
		if errors.Is(err, inventory.ErrPrecondition) && strings.Contains(err.Error(), "exists") {
			return w.retry(ctx, o, inv, who, p, what)
		}
		return !errors.Is(err, inventory.ErrCrashed)
	}
	action, why := o.decisionOf(ctx, p.OrderID, p.PartID)
	if why != "" {
		o.note(who, "leave "+what+": "+why, nil)
		return true
	}
	err := o.tries(who, p, func() (string, error) { return inv.SettleStuck(ctx, p.Node, p.PartID, action) },
		func(res string) string { return fmt.Sprintf("parts settle %s %s (%s)", what, action, res) })
	o.verdict(asideVerdict(false, err))
	if errors.Is(err, inventory.ErrPrecondition) {
		return w.retry(ctx, o, inv, who, p, what)
	}
	return !errors.Is(err, inventory.ErrCrashed)
}

// operatorTries bounds the operator's runs of one settle command: one
// whose outcome is unknown (its reply lost, the node unavailable, the
// call cut short) is run again, as an operator re-runs a command that
// failed, and meets the part settled (refused) if the first one landed.
const operatorTries = 3

// tries runs the settle command settle up to operatorTries times while
// its outcome is unknown, noting each run (line: the command as the
// operator typed it, given its answer), and returns the last error. The
// heal's operator also runs again, after topologyWait, a settle refused
// for the topology (a lost quota part's while a migration moves counts:
// "settle it when `shardis topology apply` has ended"), as an operator
// does once the apply returned: the heal's apply may have ended a moment
// before, while the instance's view, reread at most every 250 ms while
// it migrates, still said migrating (seeds 173373, 173381: the count kept
// the units, quota-vs-parts).
func (o *observed) tries(who string, p inventory.StuckPart, settle func() (string, error), line func(res string) string) error {
	var err error
	for try := 0; try < operatorTries; try++ {
		var res string
		res, err = settle()
		o.noteOperator(who, line(res), p, err)
		again := who == healOperator && errors.Is(err, inventory.ErrTopology)
		if !outcomeUnknown(err) && !again {
			break
		}
		if again {
			time.Sleep(topologyWait)
		}
	}
	return err
}

// healOperator is the heal's operator's name in the notes (tendAll).
const healOperator = "heal-operator"

// topologyWait is longer than an inventory instance's reread of a
// migrating view (resyncEvery, 250 ms).
const topologyWait = 300 * time.Millisecond

// outcomeUnknown reports whether a settle's err leaves its outcome
// unknown: an error that is no refusal (ErrPrecondition, ErrInvalid,
// ErrCorrupt, ErrStockMissing: nothing written) and no death of the
// operator.
func outcomeUnknown(err error) bool {
	return err != nil && !errors.Is(err, inventory.ErrPrecondition) && !errors.Is(err, inventory.ErrInvalid) &&
		!errors.Is(err, inventory.ErrCorrupt) && !errors.Is(err, inventory.ErrStockMissing) && !errors.Is(err, inventory.ErrCrashed)
}

// retry is `shardis parts retry NODE PART` of p.
func (w *World) retry(ctx context.Context, o *observed, inv *inventory.Inventory, who string, p inventory.StuckPart, what string) bool {
	moved, err := inv.RetryStuck(ctx, p.Node, p.PartID)
	o.note(who, fmt.Sprintf("parts retry %s (moved: %v)", what, moved), err)
	return !errors.Is(err, inventory.ErrCrashed)
}

// lostRecord reports whether p is listed with its own record gone, or a
// tombstone over it (cancelled, no units: lua/pending_index.lua,
// pend_lost).
func lostRecord(p inventory.StuckPart) bool {
	return p.State == inventory.PartMissing || (p.State == inventory.PartCancelled && p.Quantity == 0)
}

// noteOperator notes an operator's settle of p and counts it
// (observed.operated) when it answered, or its outcome is unknown (it
// may have landed).
func (o *observed) noteOperator(who, what string, p inventory.StuckPart, err error) {
	o.note(who, what, err)
	if err == nil || outcomeUnknown(err) {
		o.mu.Lock()
		o.operated = append(o.operated, p.Node+" "+p.PartID)
		o.mu.Unlock()
	}
}

// decisionOf is the system of record's decision for a part of order
// whose id is partID: Confirm when the order was paid and the part is of
// the attempt that was (the token in its id), else Cancel. Paid: a
// Confirm of order answered confirmed (or ErrDataLoss, which says the
// order is confirmed), its attempt the token of the confirmed record read
// then; or a Confirm of it ended with its outcome unknown and the
// order's record reads confirmed now (the shop asks again before it
// answers the operator: a Confirm sent again answers confirmed). why is
// not "" when the system of record cannot tell (a confirmed attempt whose
// record could not be read when the Confirm answered, nor now).
func (o *observed) decisionOf(ctx context.Context, order, partID string) (action inventory.Action, why string) {
	o.mu.Lock()
	confirmed := o.confirmed[order] != "" || o.dataLoss[order]
	unknown := o.confirmUnknown[order]
	paid, read := o.paid[order], o.paidToken
	if e, ok := o.expired[order]; ok && e.confirmed {
		// its record lived out its retention: the system of record
		// kept the paid attempt (aside.go)
		confirmed, paid = true, e.token
	}
	o.mu.Unlock()
	if !confirmed && !unknown {
		return inventory.Cancel, ""
	}
	if paid == "" && read != nil {
		paid = read(ctx, order)
		o.mu.Lock()
		o.paid[order] = paid
		o.mu.Unlock()
	}
	switch {
	case paid == "" && confirmed:
		return "", "order " + order + " confirmed, its confirmed attempt unknown"
	case paid != "" && partToken(partID) == paid:
		return inventory.Confirm, ""
	}
	return inventory.Cancel, ""
}

// settledByOperator reports whether an operator's settle of part id on
// node answered or may have landed (its state is then the operator's
// decision: never excused).
func (o *observed) settledByOperator(node, id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Contains(o.operated, node+" "+id)
}

// learnPaid records, in a schedule with the operator, the token of order
// id's confirmed record once a Confirm answered (observed.paid): the
// attempt the system of record holds paid.
func (o *observed) learnPaid(ctx context.Context, id string) {
	o.mu.Lock()
	read := o.paidToken
	o.mu.Unlock()
	if read == nil {
		return
	}
	t := read(ctx, id)
	o.mu.Lock()
	if o.paid[id] == "" {
		o.paid[id] = t
	}
	o.mu.Unlock()
}

// partToken is the attempt token of a part id (order|token|item or
// order|token|q|route|sku; an order id of the explorer holds no '|').
func partToken(id string) string {
	f := strings.Split(id, "|")
	if len(f) < 3 {
		return ""
	}
	return f[1]
}

// lostUnits is what the system of record holds of the part partID on
// node whose record is gone: the row it synced of the part before the
// record-loss actor deleted it (observed.synced), else what it knows of
// the part's order (below); and the decision for it; why is not "" when it holds
// nothing of it (an order the schedule never planned, an item index out
// of its items). A stock part's units are those a Reserve's receipt of
// its item on its node said (the item's quantity without one); a quota
// part's, its order's units of the route and SKU summed over its items.
func (o *observed) lostUnits(ctx context.Context, node, partID string) (u inventory.StuckUnits, action inventory.Action, why string) {
	f := strings.Split(partID, "|")
	order := f[0]
	o.mu.Lock()
	items, user := o.plans[order], o.users[order]
	receipts := o.reserved[order]
	row, synced := o.synced[node+" "+partID]
	o.mu.Unlock()
	if synced {
		action, why = o.decisionOf(ctx, order, partID)
		return row, action, why
	}
	if items == nil {
		return u, "", "order " + order + " is no order of the schedule"
	}
	action, why = o.decisionOf(ctx, order, partID)
	if why != "" {
		return u, "", why
	}
	switch {
	case len(f) == 5 && f[2] == "q":
		u = inventory.StuckUnits{Route: f[3], SKU: f[4], User: user}
		for _, it := range items {
			if it.Route == u.Route && it.SKU == u.SKU {
				u.Quantity += it.Quantity
			}
		}
	case len(f) == 3:
		var i int
		if _, err := fmt.Sscanf(f[2], "%d", &i); err != nil || i < 0 || i >= len(items) {
			return u, "", "part " + partID + " names no item of order " + order
		}
		u = inventory.StuckUnits{Route: items[i].Route, SKU: items[i].SKU, Quantity: items[i].Quantity}
		for _, rs := range receipts {
			for _, r := range rs {
				if r.ItemIndex == i && r.Node == node {
					u.Quantity = r.Quantity
				}
			}
		}
	default:
		return u, "", "part id " + partID + " is of no known form"
	}
	return u, action, ""
}

// paidToken reads the token of order id's confirmed record at its homes
// of T0 and T1, straight from the nodes (the system of record learns
// which attempt a Confirm confirmed when it answers); "" when no home
// holds it confirmed.
func (w *World) paidToken(ctx context.Context, id string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	for _, home := range []string{w.homes.Home(id), w.homes1.Home(id)} {
		f, err := inventory.ReadOrder(ctx, w.direct[home], id).Fields()
		if err == nil && f["status"] == string(inventory.OrderConfirmed) && f["moved"] == "" {
			return f["token"]
		}
	}
	return ""
}
