package inventory

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/topology"
)

// Retire implements [topology.Driver]: before their bump (or, c.Forward,
// their move forward), it marks moved every live order record on the
// named nodes (of c.From or c.To) that is not the record's home in
// c.From (but for the ones kept below), each node at the token it holds;
// then it puts back on them the records step 3 at c.Token had moved onto
// them (reinstall).
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
// of leaving them reserved for good. Nothing but the put back below
// installs a record on such a node meanwhile (step 3's installs run at
// c.Token, which the node refuses until its bump), so a rerun marks again
// only a record a put back installed, and puts it back again. An apply
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
	behind := map[string]string{} // node → the token it holds
	for _, name := range nodes {
		n, err := a.node(name)
		if err != nil {
			return done, err
		}
		rec, err := readRecord(ctx, n)
		if err != nil {
			return done, err
		}
		if rec.Epoch >= c.Epoch {
			continue // no longer behind: moved on by a concurrent apply (to c.Token, or past it)
		}
		behind[name] = rec.Token
		if a.inv.mutated(MutationRetireSkip) {
			continue // test-only (faults.go)
		}
		keep := func(id string) bool { return gone[homes.Home(id)] && to.Home(id) == name }
		k, err := a.retireOn(ctx, homes, n, rec.Token, keep)
		done.Retired += k
		if err != nil {
			return done, err
		}
	}
	done.Reinstalled, err = a.reinstall(ctx, c, homes, to, gone, behind)
	return done, err
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
// whose home is another node, but those keep names, and returns how many
// it marked. Each copy it marks, and each copy marked before that still
// has no TTL (expireFrozen), gets the records' retention (expireMoved).
func (a *migrator) retireOn(ctx context.Context, homes *Homes, n *node.Node, tok string, keep func(id string) bool) (int, error) {
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
			a.log.Warn("topology: order record kept though it came back with its node's data: its previous home left and cannot give its moved copy back, so this older copy is the only one left",
				"node", n.Name(), "order", id, "previous_home", homes.Home(id))
			continue
		}
		out, err := a.inv.runAt(ctx, n, orderMoveOutScript, tok, []string{orderKey(id)}, tok)
		var m movedOut
		if err == nil {
			m, err = decodeMoveOut(n.Name(), out)
		}
		if err != nil {
			return retired, fmt.Errorf("retiring the stale record of order %q on %s (run apply again to resume): %w", id, n.Name(), err)
		}
		if m.frozen {
			a.inv.expireMoved(ctx, n, tok, tok, id)
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

// reinstall puts back, on each node of behind (name → the token it
// holds, read from it before c.Token), the order records that step 3 at
// c.Token moved onto it: those homed on it in c.To whose copy at their
// c.From home (from: c.From's homes) is marked moved at c.Token. It
// returns how many it installed. The nodes of gone (goneLeft) are passed
// over, and so are those of behind: read before c.Token just now, they
// hold no mark at it (before an apply's first bump every node is behind,
// and nothing more is read).
//
// Why: a mark at c.Token is step 3's move of the order to its c.To home
// (order_move_out.lua, by the apply's sweep or an instance's touch),
// written only once every node was bumped; Retire marks only nodes read
// behind c.Token, at the token read, which their scripts refuse once the
// node is at c.Token. A node behind c.Token holds data from before its
// bump, so it lost the install, and whatever it holds of the order (an
// older copy from before an earlier move off it, retired above as stale
// since it is away from its c.From home) is older than the marked copy.
// Decisions taken on the node after the install are lost with its data;
// the marked copy is the order's newest surviving record. Left retired,
// the order would have no live record: its home's copy is marked, and
// step 3 is not run again on a rerun once a node is stable at c.Token,
// nor by a move forward. The copy is read by order_move_out.lua at
// c.Token, which marks it again as it was and returns its value (what
// step 3's move read, without a TTL when reserved), and installed at the
// node's token, which it holds until its bump: no instance writes it
// meanwhile. Installing it again on a rerun is harmless (the install
// answers "exists", or the record was retired again above). A node at
// another token than c.Token holds no mark at c.Token, and is not read
// further (markedHome). A limit: a copy marked without a TTL (its order
// reserved) lives inventory.retention after its install landed
// (expireMoved), so a put back run later than that finds nothing for such
// an order, which came due and was decided long before (SECURITY.md).
func (a *migrator) reinstall(ctx context.Context, c topology.Change, from, to *Homes, gone map[string]bool, behind map[string]string) (int, error) {
	if len(behind) == 0 || a.inv.mutated(MutationReinstallSkip) {
		return 0, nil // the mutation is test-only (faults.go)
	}
	put := 0
	for _, name := range c.From.Nodes() {
		if _, back := behind[name]; back || gone[name] {
			continue
		}
		h, err := a.markedHome(ctx, c, name)
		if err != nil {
			return put, err
		}
		if h == nil {
			continue
		}
		ids, err := movedOnto(ctx, h, from, to, behind, c.Token)
		if err != nil {
			return put, err
		}
		for _, id := range ids {
			dest := to.Home(id)
			ok, err := a.putBack(ctx, h, dest, behind[dest], id, c.Token)
			if err != nil {
				return put, fmt.Errorf("putting back order %q on %s from its moved copy on %s (run apply again to resume): %w", id, dest, name, err)
			}
			if !ok {
				continue
			}
			a.log.Warn("topology: order record put back from its moved copy: its node went back to data from before the apply moved it there",
				"node", dest, "order", id, "from", name)
			put++
			if a.inv.crash(ctx, "reinstall") {
				return put, errCrashed
			}
		}
	}
	return put, nil
}

// markedHome returns the node named name, a member of c.From, when it is
// at c.Token (only then can it hold copies marked moved at c.Token), nil
// when it is not.
func (a *migrator) markedHome(ctx context.Context, c topology.Change, name string) (*node.Node, error) {
	h, err := a.node(name)
	if err != nil {
		return nil, err
	}
	rec, err := readRecord(ctx, h)
	if err != nil || rec.Token != c.Token {
		return nil, err
	}
	return h, nil
}

// movedOnto returns the ids of the order records on h, their home in
// from, that are marked moved at tok and whose home in to is a node of
// behind.
func movedOnto(ctx context.Context, h *node.Node, from, to *Homes, behind map[string]string, tok string) ([]string, error) {
	keys, err := scan(ctx, h, orderKeyPrefix+"*")
	if err != nil {
		return nil, err
	}
	var cand []string
	for _, k := range keys {
		id := k[len(orderKeyPrefix):]
		if _, ok := behind[to.Home(id)]; ok && from.Home(id) == h.Name() && to.Home(id) != h.Name() {
			cand = append(cand, id)
		}
	}
	var ids []string
	err = readOrders(ctx, h, cand, func(id string, f map[string]string) {
		if f["moved"] == tok {
			ids = append(ids, id)
		}
	})
	return ids, err
}

// putBack installs order id's record, marked moved at tok on h, on the
// node named dest at dest's token destTok. It reports whether it
// installed it: not when h's copy is no longer marked at tok, nor when
// dest holds a live record already (put back by a concurrent run).
func (a *migrator) putBack(ctx context.Context, h *node.Node, dest, destTok, id, tok string) (bool, error) {
	out, err := a.inv.runAt(ctx, h, orderMoveOutScript, tok, []string{orderKey(id)}, tok)
	if err != nil {
		return false, err
	}
	m, err := decodeMoveOut(h.Name(), out)
	if err != nil || !m.moved {
		return false, err
	}
	n, err := a.node(dest)
	if err != nil {
		return false, err
	}
	reply, err := a.inv.runAt(ctx, n, orderInstallScript, destTok, []string{orderKey(id)}, m.pttl, m.rec)
	if err != nil {
		return false, err
	}
	installed, err := decodeInstall(n.Name(), reply)
	if err == nil && m.frozen {
		a.inv.expireMoved(ctx, h, tok, tok, id)
	}
	return installed, err
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
// that have no TTL the records' retention (expireMoved): the copies an
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
		for j, id := range part {
			if ttls[j].Val() == -1 { // go-redis: -1, not a duration, for a key without one
				a.inv.expireMoved(ctx, n, tok, marked[id], id)
			}
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
