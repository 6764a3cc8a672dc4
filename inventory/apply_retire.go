package inventory

import (
	"context"
	"fmt"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/topology"
)

// Retire implements [topology.Driver]: before their bump, it marks moved
// every live order record on the named nodes (of c.From or c.To) that is
// not the record's home in c.From, each node at the token it holds.
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
// kept, frozen, and an install overwrites it; its inline parts get their
// records on the node first, as at any move, so the reconcilers settle
// the units they hold there by the order's decision at its home instead
// of leaving them reserved for good. Nothing can install a record on such
// a node meanwhile (installs run in step 3, at c.Token, which the node
// refuses until its bump), and a rerun marks nothing twice.
func (a *migrator) Retire(ctx context.Context, c topology.Change, nodes []string) (int, error) {
	a.begin(c)
	homes, err := homesOf(c.From)
	if err != nil {
		return 0, fmt.Errorf("%w: the applied topology: %v", ErrInvalid, err)
	}
	if a.inv.mutated(MutationRetireSkip) {
		return 0, nil // test-only (faults.go)
	}
	retired := 0
	for _, name := range nodes {
		n, err := a.node(name)
		if err != nil {
			return retired, err
		}
		ids, err := strayOrders(ctx, homes, n)
		if err != nil {
			return retired, err
		}
		if len(ids) == 0 {
			continue
		}
		rec, err := a.Read(ctx, name) // its token: the scripts check it
		if err != nil {
			return retired, err
		}
		for _, id := range ids {
			if _, err := a.inv.runAt(ctx, n, orderMoveOutScript, rec.Token, []string{orderKey(id)}, rec.Token); err != nil {
				return retired, fmt.Errorf("retiring the stale record of order %q on %s (run apply again to resume): %w", id, name, err)
			}
			a.log.Warn("topology: stale order record retired: it came back with its node's data, away from its home",
				"node", name, "order", id, "home", homes.Home(id))
			retired++
			if a.inv.crash(ctx, "retire") {
				return retired, errCrashed
			}
		}
	}
	return retired, nil
}

// strayOrders returns the ids of the live order records on n whose home
// is another node.
func strayOrders(ctx context.Context, homes *Homes, n *node.Node) ([]string, error) {
	keys, err := scan(ctx, n, orderKeyPrefix+"*")
	if err != nil {
		return nil, err
	}
	var away []string
	for _, k := range keys {
		if id := k[len(orderKeyPrefix):]; homes.Home(id) != n.Name() {
			away = append(away, id)
		}
	}
	var ids []string
	err = readOrders(ctx, n, away, func(id string, f map[string]string) {
		if len(f) > 0 && f["moved"] == "" {
			ids = append(ids, id)
		}
	})
	return ids, err
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
