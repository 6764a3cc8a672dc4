package inventory

import (
	"context"
	"fmt"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/topology"
)

// This file puts back, during [migrator.Retire], the order records that
// step 3 at the change's token moved onto a node that then went back to
// older data (topology/doc.go, "A node that went back").
//
// What is put back: on each node of behind (name → the token it holds,
// read from it before c.Token), the order records homed on it in c.To
// whose copy at their c.From home is marked moved at c.Token. The nodes
// gone (goneLeft) are passed over as homes, and so are those of behind:
// read before c.Token just now, they hold no mark at it (before an
// apply's first bump every node is behind, and nothing more is read).
//
// Why: a mark at c.Token is step 3's move of the order to its c.To home
// (order_move_out.lua, by the apply's sweep or an instance's touch),
// written only once every node was bumped. A node behind c.Token holds
// data from before its bump, so it lost the install, and whatever it
// holds of the order (an older copy from before an earlier move off it)
// is older than the marked copy. Decisions taken on the node after the
// install are lost with its data; the marked copy is the order's newest
// surviving record. Left as it is, the order would have no live record
// or an older one: step 3 is not run again on a rerun once a node is
// stable at c.Token, nor by a move forward.
//
// The states of such an order on its node N (behind) and the rule that
// keeps every interleaving of applies safe, two forwards at once
// included:
//
//	absent or stale ──put back──▶ newest (live) ──N moves forward──▶ served
//
//   - planned first: Retire reads the plan (planPutBacks) before it
//     retires anything, and never retires a planned record on its node:
//     the put back replaces it in place (order_install.lua with
//     "replace": its inline parts get their records first, as at a
//     retirement). So no apply ever marks a record another apply put
//     back. Before, the stale record was retired and the put back
//     followed; a second apply that had read N behind retired the record
//     the first had put back, the first moved N forward, and the
//     second's put back was refused at N's new token: the order was left
//     with no live record (found by a review with a gated test:
//     TestConcurrentForwardsKeepThePutBack).
//   - every put back writes the same value: the marked copy is read by
//     order_move_out.lua at c.Token, which marks it again as it was and
//     returns its value (what step 3's move read, without a TTL when
//     reserved); nothing writes a copy marked at c.Token, so every plan
//     of every apply names the same records and every put back installs
//     the same value. A put back that finds that value answers "exists".
//   - only while N is behind: each install runs at the token read from N,
//     which N refuses once it moved forward (or was bumped), so no put
//     back overwrites what instances write after; until then no instance
//     at c.Token writes N (its scripts are refused there).
//
// A rerun after any crash plans again and puts back again (a record put
// back answers "exists"). A node at another token than c.Token holds no
// mark at c.Token, and is not read further (markedHome). A limit: a copy
// marked without a TTL (its order reserved) lives inventory.retention
// after its install landed (expireMoved), so a put back run later than
// that finds nothing for such an order, which came due and was decided
// long before (SECURITY.md).

// putBackOf is one planned put back: order id, whose copy on h is marked
// moved at the change's token, onto its home dest.
type putBackOf struct {
	h        *node.Node
	id, dest string
}

// putBackPlan is the put backs Retire runs, in order, and each planned
// order's destination.
type putBackPlan struct {
	list []putBackOf
	dest map[string]string // order id → the node it is put back on
}

// planPutBacks returns the put backs of this file's rule for the nodes of
// behind; none under [MutationReinstallSkip] (test-only, faults.go).
func (a *migrator) planPutBacks(ctx context.Context, c topology.Change, from, to *Homes, gone map[string]bool, behind map[string]string) (putBackPlan, error) {
	plan := putBackPlan{dest: map[string]string{}}
	if len(behind) == 0 || a.inv.mutated(MutationReinstallSkip) {
		return plan, nil
	}
	for _, name := range c.From.Nodes() {
		if _, back := behind[name]; back || gone[name] {
			continue
		}
		h, err := a.markedHome(ctx, c, name)
		if err != nil {
			return plan, err
		}
		if h == nil {
			continue
		}
		ids, err := movedOnto(ctx, h, from, to, behind, c.Token)
		if err != nil {
			return plan, err
		}
		for _, id := range ids {
			plan.list = append(plan.list, putBackOf{h: h, id: id, dest: to.Home(id)})
			plan.dest[id] = to.Home(id)
		}
	}
	return plan, nil
}

// reinstall runs plan's put backs, each at its destination's token in
// behind, and returns how many it installed.
func (a *migrator) reinstall(ctx context.Context, c topology.Change, plan putBackPlan, behind map[string]string) (int, error) {
	put := 0
	for _, p := range plan.list {
		ok, err := a.putBack(ctx, p.h, p.dest, behind[p.dest], p.id, c.Token)
		if err != nil {
			return put, fmt.Errorf("putting back order %q on %s from its moved copy on %s (run apply again to resume): %w", p.id, p.dest, p.h.Name(), err)
		}
		if !ok {
			continue
		}
		a.log.Warn("topology: order record put back from its moved copy: its node went back to data from before the apply moved it there",
			"node", p.dest, "order", p.id, "from", p.h.Name())
		put++
		if a.inv.crash(ctx, "reinstall") {
			return put, errCrashed
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
// node named dest at dest's token destTok, replacing the live record
// dest may hold (this file's rule). It reports whether it wrote it: not
// when h's copy is no longer marked at tok, nor when dest holds that
// record already (put back by a concurrent or earlier run).
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
	reply, err := a.inv.runAt(ctx, n, orderInstallScript, destTok, []string{orderKey(id)}, m.pttl, m.rec, "replace")
	if err != nil {
		return false, err
	}
	installed, err := decodeInstall(n.Name(), reply)
	if err == nil && m.frozen {
		a.inv.expireMoved(ctx, h, tok, tok, id)
	}
	return installed, err
}
