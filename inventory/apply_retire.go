package inventory

import (
	"context"
	"fmt"
	"maps"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/topology"
)

// Retire implements [topology.Driver]: before their bump (or, c.Forward,
// their move forward), it marks moved every live order record on the
// named nodes (of c.From or c.To) that is not the record's home in
// c.From (but for the ones kept below), each node at the token it holds;
// then it puts back on them the records step 3 at c.Token had moved onto
// them (apply_putback.go: planned before anything is retired, and never
// retired on the node they are put back on, but replaced in place).
// With c.Forward it then takes off the nodes the counters c's transfers
// had moved off them and their older copy brought back
// (apply_takeback.go); without it, before their bump, it takes off those
// of the nodes that went back (fenced, or below c.From's epoch) whose
// transfer's destination holds the marker (apply_takeback.go, "Before a
// resumed bump"). First of all, before it writes anything, it
// refuses when a node behind c.Epoch holds a stale counter c would put
// in play (refuseStale, apply_stale.go).
//
// Why such a record is stale, and why marking it is safe: in a stable
// topology every record lives at its home (step 3 of each apply moved the
// records whose home moved, and instances write records at their home
// only), so a live record elsewhere came back with its node's data: a
// node restored from an older copy and accepted, whose copy predates the
// move of the record off it, or a node that rejoins with what it held when
// it left. The apply asks first, before its first bump, with every node
// stable at c.From's token: then for every node of both topologies. A
// rerun that resumes an interrupted bump asks again for the nodes not yet
// at c.Token: such a node was at c.From's token (or, gone back since, an
// older one), and nothing of step 3 has written it (step 3 starts once
// every node is bumped, and a node refuses callers at c.Token until its
// bump), so the rule still holds there; a copy restored onto it after the
// apply began, older than the move of some record off it, comes back
// with that record live. No instance reads it (not its home), but the
// apply's step 3, or a later one, that moves the order's home onto that
// node would find it live and keep it over the order's current record
// (order_install.lua answers "exists"): a decision taken since the copy
// (a Confirm, a Cancel) would be lost on a node that lost nothing. The
// mark is order_move_out.lua's, at the node's token: the record's data is
// kept, frozen, for the retention (expireMoved; so are copies marked
// before and left without a TTL: expireFrozen), and an install
// overwrites it; its inline parts get their
// records on the node first, as at any move, so the reconcilers settle
// the units they hold there by the order's decision at its home instead
// of leaving them reserved for good. Nothing but a put back installs a
// record on such a node meanwhile (step 3's installs run at c.Token,
// which the node refuses until its bump), and no retirement of the
// change marks a record a put back of it wrote (apply_putback.go). An
// apply
// of the current topology that brings forward the nodes that went back
// (c.Forward, topology/doc.go) asks for those: step 3 ran to its end at
// c.Token on the others, and the same rule holds on them.
//
// Each node is acted on at the token read from it here, so every script
// is refused once the node moved on; a node read at c.Token, or at any
// token of c.Epoch or later (bumped or brought forward by an apply
// running concurrently, or by a later one: a Retire that read the node
// behind may run late), is left alone: its records may be the ones
// instances act on now, and c.From's homes are not theirs.
//
// With c.Forward, a node that left with the apply need not answer: when
// it is no longer configured or usable (goneLeft), nothing can be put
// back from it, so a record on a node brought forward whose home in c.To
// is that node and whose c.From home is the gone one is kept, with a
// warning: retired, the order would have no live record, and the older
// copy is the only one left (forwards kept every record before they
// retired any).
func (a *migrator) Retire(ctx context.Context, c topology.Change, nodes []string) (topology.Retirement, error) {
	a.begin(c)
	var done topology.Retirement
	homes, err := homesOf(c.From)
	if err != nil {
		return done, fmt.Errorf("%w: the applied topology: %v", ErrInvalid, err)
	}
	to, err := homesOf(c.To)
	if err != nil {
		return done, fmt.Errorf("%w: the new topology: %v", ErrInvalid, err)
	}
	gone := a.goneLeft(c)
	behind, mid, err := a.behind(ctx, c, nodes)
	if err != nil {
		return done, err
	}
	// before any write: stale counters c would put in play on a node
	// about to be bumped or moved forward (apply_stale.go)
	if err := a.refuseStale(ctx, c, behindEpoch(c, behind), !c.Forward, false); err != nil {
		return done, err
	}
	plan, err := a.planPutBacks(ctx, c, homes, to, gone, behind)
	if err != nil {
		return done, err
	}
	memory := memoryOf(c)
	for _, name := range nodes {
		tok, ok := behind[name]
		if !ok || a.inv.mutated(MutationRetireSkip) {
			continue // the mutation is test-only (faults.go)
		}
		n, err := a.node(name)
		if err != nil {
			return done, err
		}
		keep := func(id string) bool {
			if plan.dest[id] == name {
				return true // replaced in place by its put back
			}
			if !gone[homes.Home(id)] || to.Home(id) != name {
				return false
			}
			a.log.Warn("topology: order record kept though it came back with its node's data: its previous home left and cannot give its moved copy back, so this older copy is the only one left",
				"node", name, "order", id, "previous_home", homes.Home(id))
			return true
		}
		k, err := a.retireOn(ctx, memory, homes, n, tok, keep)
		done.Retired += k
		if err != nil {
			return done, err
		}
	}
	put, k, err := a.reinstall(ctx, c, plan, behind)
	done.Reinstalled, done.Retired = put, done.Retired+k
	if err != nil {
		return done, err
	}
	if !c.Forward {
		// before their bump: what c's transfers moved off the nodes that
		// went back (apply_takeback.go, "Before a resumed bump")
		done.TakenBack, _, err = a.takeBack(ctx, c, goneBack(c, behind), true)
		return done, err
	}
	maps.Copy(mid, behind)
	done.TakenBack, done.LeftBehind, err = a.takeBack(ctx, c, mid, false)
	return done, err
}

// behind reads the topology record of each of nodes and returns those
// behind c (an epoch before c.Epoch, or fenced at c.Epoch: accepted
// behind its peers, but at c.Token and c.Attempt), each with the token it
// holds. A node fenced at a later epoch is ahead of c, not behind.
//
// With c.Forward it returns too, in mid, those at c.Token, unfenced, in
// phase migrating, each with c.Token: Retire with c.Forward is given such
// nodes once step 3 at c.Token has ended (a record at the token is
// stable: topology/doc.go, "A copy taken during step 3"), so each holds a
// copy from before its end, or step 4 is under way on it. Their records
// are left alone (instances at the token act on them), but what step 3
// moved off them is taken back (takeBack: only transfers whose
// destination holds the marker; on a node step 3 wrote whole, each finds
// its counter emptied, and writes nothing).
func (a *migrator) behind(ctx context.Context, c topology.Change, nodes []string) (behind, mid map[string]string, err error) {
	behind, mid = map[string]string{}, map[string]string{}
	for _, name := range nodes {
		n, err := a.node(name)
		if err != nil {
			return nil, nil, err
		}
		rec, err := readRecord(ctx, n)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case rec.Lost:
			// which copy its data is cannot be told: retiring by a guess
			// could retire live records
			return nil, nil, fmt.Errorf("%w: node %s lost its topology record (its stamp names %s): which copy of its data it holds cannot be told: restore its %s of that token by hand (from a peer or a backup that holds it; an instance copies it from an unfenced peer at that token, if any), then run apply again",
				ErrCorrupt, name, rec.Token, keyTopology)
		case rec.Fenced && rec.Held == c.Token && rec.Attempt == c.Attempt:
			// fenced, but at the change's own token and attempt: its
			// records are the apply's (nothing retired), but a copy taken
			// during step 3 lacks what step 3 moved off it: with
			// c.Forward, taken back as for mid (on a node step 3 wrote
			// whole, nothing to take)
			if c.Forward {
				mid[name] = rec.Token
			}
		case rec.Epoch < c.Epoch || (rec.Fenced && rec.Epoch == c.Epoch):
			behind[name] = rec.Token
		case c.Forward && !rec.Fenced && rec.Token == c.Token && rec.Phase == topology.PhaseMigrating:
			mid[name] = rec.Token
		} // else moved on by a concurrent apply (to c.Token, or past it), or fenced ahead of it
	}
	return behind, mid, nil
}

// goneLeft returns, with c.Forward, the nodes that left with the apply
// and are no longer configured or usable, each named in a warning; none
// without it (every node of both topologies must answer then).
func (a *migrator) goneLeft(c topology.Change) map[string]bool {
	gone := map[string]bool{}
	if !c.Forward {
		return gone
	}
	for _, name := range c.Left {
		if _, err := a.node(name); err != nil {
			gone[name] = true
			a.log.Warn("topology: a node that left is not configured or usable: the order records the apply moved off it cannot be put back from it, and their older copies on the nodes brought forward are kept",
				"node", name, "err", err)
		}
	}
	return gone
}

// retireOn marks moved, at token tok (n's), the live order records on n
// whose home is another node, but those keep names and those a put back
// of the apply memory names wrote (apply_putback.go: the script checks
// its memory, putBackKey, where it marks), and returns how many it
// marked. Each copy it marks, and each
// copy marked before that still has no TTL (expireFrozen), gets the
// records' retention (expireMoved).
func (a *migrator) retireOn(ctx context.Context, memory string, homes *Homes, n *node.Node, tok string, keep func(id string) bool) (int, error) {
	ids, marked, err := strayOrders(ctx, homes, n)
	if err != nil {
		return 0, err
	}
	if err := a.expireFrozen(ctx, n, tok, marked); err != nil {
		return 0, err
	}
	retired := 0
	for _, id := range ids {
		if keep(id) {
			continue
		}
		ok, err := a.retireOne(ctx, memory, n, tok, id)
		if err != nil {
			return retired, fmt.Errorf("retiring the stale record of order %q on %s (run apply again to resume): %w", id, n.Name(), err)
		}
		if !ok {
			continue // put back by this change (the order's newest record), or retired meanwhile
		}
		a.log.Warn("topology: stale order record retired: it came back with its node's data, away from its home",
			"node", n.Name(), "order", id, "home", homes.Home(id))
		retired++
		if a.inv.crash(ctx, "retire") {
			return retired, errCrashed
		}
	}
	return retired, nil
}

// retireOne marks order id's record on n moved at n's token tok, unless
// a put back of the apply memory names wrote it (putBackKey, checked by
// the script where it marks), and gives a marked
// copy without a TTL the records' retention. It reports whether it
// marked the record: not when it kept it, nor when the record was gone
// or marked already (by a concurrent run).
func (a *migrator) retireOne(ctx context.Context, memory string, n *node.Node, tok, id string) (bool, error) {
	out, err := a.inv.runAt(ctx, n, orderMoveOutScript, tok, []string{orderKey(id), putBackKey(memory, id)}, tok)
	if err != nil {
		return false, err
	}
	m, err := decodeMoveOut(n.Name(), out)
	if err != nil || !m.moved {
		return false, err
	}
	if m.frozen {
		a.inv.expireMoved(ctx, n, tok, tok, id)
	}
	return true, nil
}

// strayOrders returns the ids of the live order records on n whose home
// is another node, and the marks (id → token) of the records there marked
// moved.
func strayOrders(ctx context.Context, homes *Homes, n *node.Node) (live []string, marked map[string]string, err error) {
	keys, err := scan(ctx, n, orderKeyPrefix+"*")
	if err != nil {
		return nil, nil, err
	}
	var away []string
	for _, k := range keys {
		if id := k[len(orderKeyPrefix):]; homes.Home(id) != n.Name() {
			away = append(away, id)
		}
	}
	marked = map[string]string{}
	err = readOrders(ctx, n, away, func(id string, f map[string]string) {
		switch {
		case len(f) == 0:
		case f["moved"] == "":
			live = append(live, id)
		default:
			marked[id] = f["moved"]
		}
	})
	return live, marked, err
}

// expireFrozen gives the copies of marked (id → mark) on n, n's token tok,
// that have no TTL the records' retention (expireCopies: one script per
// batch of 500): the copies an
// earlier apply or release left frozen (a crash at "install", a failed
// expireMoved, or a release before expireMoved). Why that is safe: a
// mark on a node Retire reads is at an older token than the change's,
// whose apply ran step 3 to its end (an apply starts only from nodes all
// stable: topology's check), so the install that followed it landed;
// the retention, counted from now, keeps the copy as long as a put back
// from it (a forward of that older topology, reinstall) could need it,
// and no other step reads a marked copy but as no record.
func (a *migrator) expireFrozen(ctx context.Context, n *node.Node, tok string, marked map[string]string) error {
	ids := make([]string, 0, len(marked))
	for id := range marked {
		ids = append(ids, id)
	}
	const batch = 500
	for i := 0; i < len(ids); i += batch {
		part := ids[i:min(i+batch, len(ids))]
		pipe := n.Client().Pipeline()
		ttls := make([]*redis.DurationCmd, len(part))
		for j, id := range part {
			ttls[j] = pipe.PTTL(ctx, orderKey(id))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("%w: node %s: reading the TTLs of marked order records: %w", ErrUnavailable, n.Name(), err)
		}
		var frozen, marks []string
		for j, id := range part {
			if ttls[j].Val() == -1 { // go-redis: -1, not a duration, for a key without one
				frozen, marks = append(frozen, id), append(marks, marked[id])
			}
		}
		if len(frozen) > 0 {
			a.inv.expireCopies(ctx, n, tok, frozen, marks)
		}
	}
	return nil
}

// readOrders reads the records of ids on n, pipelined in batches, and
// calls each with every id and its fields (none when it has no record).
func readOrders(ctx context.Context, n *node.Node, ids []string, each func(id string, f map[string]string)) error {
	const batch = 500
	for i := 0; i < len(ids); i += batch {
		part := ids[i:min(i+batch, len(ids))]
		pipe := n.Client().Pipeline()
		reads := make([]*OrderRead, len(part))
		for j, id := range part {
			reads[j] = ReadOrder(ctx, pipe, id)
		}
		_, _ = pipe.Exec(ctx) // each read's own error is checked below (ReadOrder's layouts)
		for j, rd := range reads {
			f, err := rd.Fields()
			if err != nil {
				return fmt.Errorf("%w: node %s: reading order records: %w", ErrUnavailable, n.Name(), err)
			}
			each(part[j], f)
		}
	}
	return nil
}

// runAt is run at token tok without this instance's view: for the
// apply's steps before its bump (apply_retire.go), whose instance serves
// the new configuration and so may lack a node of the applied topology
// (one that leaves): its view is not ready, while the nodes answer at
// tok. A script refused for its epoch is not retried.
func (inv *Inventory) runAt(ctx context.Context, n *node.Node, s *luaScript, tok string, keys []string, args ...any) (any, error) {
	reply, seq, err := inv.execFaulty(ctx, n, s, tok, keys, args)
	if err != nil {
		return nil, nodeErr(n, err)
	}
	if s.write {
		if err := n.Acknowledge(ctx, seq); err != nil {
			return nil, nodeErr(n, err)
		}
	}
	return reply, nil
}
