package inventory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// Counters that came back on a node brought forward.
//
// Step 3 of an apply moves off a node the stock of every route it leaves
// and the quota counters whose home moved (transfers: migrate.go). A node
// that then goes back to an older copy of its data, taken before those
// transfers, and is brought forward (topology/doc.go, "A node that went
// back": no step 3 runs again) holds those counters again as the copy
// had them: units its transfer already gave to their destination, counted
// twice over all nodes. No instance reads them there (the node no longer
// serves the route, nor is the user's quota home), but an apply that
// gives it the route or the user again would serve them: stock sold
// twice, a limit counted from a stale count. Found by the schedule
// explorer (seed 152086: `make explore SEED=152086 N=1 PROFILE=crash
// TOPOLOGY=0.5 LOSS=0.3 TWIN=0.3 LOSS2=0.3 SHRINK=0.3 ABANDON=0.05
// OOM=0.2 CLOCK=0.2`: 26 units of a SKU over all nodes where 14 were
// loaded).
//
// So a move forward (Retire with c.Forward), once it retired and put back
// the node's order records, takes them back: for every route of c.From
// the node served whose members changed in c.To, it runs again, at the
// node's own token, the transfers step 3 of c ran off it (the same ids,
// xferID(c.Epoch, …), to the same destinations: the SKU's or the user's
// home in c.To's route), but only the part that concerns the node, and
// only for a transfer its destination applied:
//
//	destination's marker of the id ──take back, one script at the node's token: subtract what the copy holds──▶ none left
//	no marker                     ──▶ left as it is, with a warning
//	a stock hash with units reserved ──▶ left as it is (busy), with a warning
//
// Why it is safe:
//   - the marker says the destination added the transfer's units at
//     c.Epoch (the in script writes it with the addition), so the units
//     the node holds again for that counter are counted there already:
//     subtracting them on the node leaves the total as it was before the
//     node went back. Nothing is written on the destination;
//   - without a marker nothing says where the units are: the counter did
//     not exist when step 3 ran (a later one), or the marker expired
//     (xferMarkerTTL, 30 days): moving it could add units twice, leaving
//     it strands them at worst (no instance reads them), the side that
//     sells nothing twice;
//   - the node is behind (every script refuses callers at another token,
//     so no instance acts on it) until the move forward writes its
//     record, after this; the take back is one script
//     (xferTakeBackScript: it validates the counter, then subtracts all
//     it holds and drops any record of the id, or writes nothing), so a
//     run cut short anywhere took the counter back whole or not at all,
//     and the next run of the apply, which finds the node behind still,
//     reads the counter again (nothing left: nothing written);
//   - it leaves no transfer record. The node may be served again below
//     c.Epoch: every node that had reached c.Epoch goes back below it
//     too (older copies, accepted), and the apply of their topology
//     brings the fenced ones forward, this one with them, whose data
//     instances then sell, load and count quotas on. An apply of c.To
//     then runs at c.Epoch again (c.Token, when c.To is applied again:
//     another attempt), and its step 3 transfers the node's counters
//     under the same ids (xferID: the epoch, not the attempt). A record
//     of c's id left on the node by a take back cut short between an
//     out and a done is what that step 3's out reads as its own (out
//     returns a record it finds: the rerun rule): its in adds on the
//     destination, which went back and lost the units, what the copy
//     held when the take back ran, and its done subtracts that on the
//     node, whatever was sold or loaded there since: units sold twice,
//     or stranded; a user's count short of what the user bought (found
//     by a review: TestTakeBackLeavesNoTransferRecord). A take back
//     never writes a marker (nothing on the destination), so the
//     converse, a marker on a node below c.Epoch, never arises: xfer_in
//     writes it only at c.Token, and a copy holding it is at c.Epoch or
//     later;
//   - a stock hash with reserved units holds parts pending in the copy,
//     which the reconcilers settle once the node is forward (by their
//     orders' decisions): it is left, with a warning, as step 3 leaves a
//     busy counter, and no later run takes it back (the node is at the
//     token then). So are counters that earlier applies moved off the
//     node (only c's transfers are read), as for order records.
//
// Every stock hash it leaves with units on a node that does not serve
// its route in c.To is reported (Retirement.LeftBehind, with a warning):
// those of c's transfers without a marker or with units reserved, and
// those an earlier change moved off (named by a scan of the node's stock
// hashes of those routes once the transfers are done: reads only). Their
// units are counted where the transfers put them; an apply that would
// serve them again refuses (apply_stale.go) until they are deleted.
//
// Before a resumed bump (resume: Retire without c.Forward) it runs on the
// nodes behind c.Token that went back (goneBack), before they are bumped
// again, and takes back only what a marker shows applied, naming nothing
// left: the step 3 that follows the bump moves the rest (a counter
// without a marker is one no transfer of c carried yet; a busy one waits
// there for its parts, and its transfer's in is then a no-op, its done
// subtracting what the node holds). Why it cannot be left to that step 3
// alone (the rerun rule): a concurrent apply of the same change whose
// step 3 had passed the node before it went back writes stable on it once
// it is bumped again, whether the resume's step 3 reached it or not (the
// resume died after its bump, or after its transfer's out on the node:
// the transfer's record left there), and no later run reads a node
// stable at the token: the units stayed there, counted on the
// destination too, reported nowhere (the schedule explorer's seed 168235:
// 24 loaded where 14 were; TestResumeTakesBackBeforeItBumpsANodeBehind).
// Taken back before the bump, the node holds none of them whichever
// apply's step 3 or 4 comes next; it is behind until the bump, so the
// same reasons as for a move forward make it safe. Since step 4 writes a
// node stable only at the incarnation read before its step 3 began
// (topology/doc.go, "A copy taken during step 3"), such a concurrent step
// 4 no longer writes the node stable at all (the accept that brought the
// copy back gave it a new incarnation): that apply fails, and the run
// after brings the node forward (a node written stable by then) or
// resumes. So a busy counter (units reserved, or a quota counter pending
// parts hold, in the copy), which this take back leaves to the step 3
// after the bump, is moved by a resumed step 3 once its parts settle, or
// left by the move forward's take back and named there
// (Retirement.LeftBehind, a warning), as every move forward leaves a
// busy counter: counted on its destination too, out of every instance's
// reach, no longer reported nowhere
// (TestResumeBesideAConcurrentStep4NamesABusyCounter).
func (a *migrator) takeBack(ctx context.Context, c topology.Change, behind map[string]string, resume bool) (int, []topology.LeftCounter, error) {
	tb := tookBack{resume: resume}
	for name, tok := range behind {
		n, err := a.node(name)
		if err != nil {
			return tb.took, tb.left, err
		}
		move := a.takeBackAt(tok, &tb)
		for route, oldMs := range c.From.Routes {
			newMs, ok := c.To.Routes[route]
			if !ok || sameMembers(oldMs, newMs) || !membersOf(oldMs)[name] {
				continue
			}
			ring, err := router.NewRing(newMs)
			if err != nil {
				return tb.took, tb.left, err
			}
			held, err := a.moveQuotas(ctx, route, n, ring, move)
			if err != nil {
				return tb.took, tb.left, err
			}
			for _, k := range held { // counted by parts pending in the copy
				if resume {
					break // step 3 moves it once its parts settle
				}
				a.log.Warn("topology: a quota counter came back with its node's data, held by parts pending in the copy: left as it is (the reconcilers settle its parts; its count is counted on its transfer's destination too)",
					"node", n.Name(), "key", k)
				tb.left = append(tb.left, topology.LeftCounter{Node: n.Name(), Key: k, Why: "held by pending parts"})
			}
			if !a.leaves(name, membersOf(newMs)) {
				continue
			}
			if _, err := a.moveStock(ctx, route, n, ring, move); err != nil {
				return tb.took, tb.left, err
			}
		}
		if resume {
			continue // no report: the step 3 after the bump moves the rest
		}
		if err := a.leftOffRoute(ctx, c, n, &tb); err != nil {
			return tb.took, tb.left, err
		}
	}
	return tb.took, tb.left, nil
}

// goneBack returns the nodes of behind (name → the token read) that went
// back to an older copy of their data: fenced (accepted behind a peer:
// router.AcceptNode), or below the epoch c moves from. The others are at
// c.From's token unfenced: the bump did not reach them (an interrupted
// bump, or a new epoch's apply before its first), so no transfer of c ran
// off them and none is to take back (a copy of c.From's epoch accepted
// while a peer was at c.Epoch, or unreadable, is fenced).
func goneBack(c topology.Change, behind map[string]string) map[string]string {
	out := map[string]string{}
	for name, tok := range behind {
		e, _, _ := topology.SplitToken(strings.TrimPrefix(tok, node.FencePrefix))
		if strings.HasPrefix(tok, node.FencePrefix) || e < c.Epoch-1 {
			out[name] = tok
		}
	}
	return out
}

// leftOffRoute adds to tb.left the stock hashes with units that n holds
// of the routes of c.To it does not serve, but those listed already:
// counters earlier changes than c moved off it, come back with its copy.
func (a *migrator) leftOffRoute(ctx context.Context, c topology.Change, n *node.Node, tb *tookBack) error {
	for _, route := range slices.Sorted(maps.Keys(c.To.Routes)) {
		if membersOf(c.To.Routes[route])[n.Name()] {
			continue
		}
		keys, err := scan(ctx, n, stockKeyPrefix+route+":*")
		if err != nil {
			return err
		}
		slices.Sort(keys)
		for _, k := range keys {
			if slices.ContainsFunc(tb.left, func(l topology.LeftCounter) bool { return l.Node == n.Name() && l.Key == k }) {
				continue
			}
			units, held, err := stockUnits(ctx, n, k)
			if err != nil {
				return err
			}
			if !held {
				continue
			}
			a.log.Warn("topology: a stock hash of a route the node does not serve came back with its data, moved off it by an earlier apply than the last: left as it is (no instance reads it there; its units are counted where that apply moved them)",
				"node", n.Name(), "key", k, "units", units)
			tb.left = append(tb.left, topology.LeftCounter{Node: n.Name(), Key: k, Why: "moved off by an earlier apply"})
		}
	}
	return nil
}

// tookBack is what a take back did: how many counters it took off their
// node, and those it left there (a warning names each).
type tookBack struct {
	took   int
	left   []topology.LeftCounter
	resume bool // before a resumed bump: nothing left is named (takeBack)
}

// takeBackAt is the mover of a move forward's take back on a node at
// token tok (takeBack): it subtracts on src what the copy holds of a
// counter whose transfer dst applied, counting each in tb, and leaves any
// other as it is (a warning names it; tb lists it).
func (a *migrator) takeBackAt(tok string, tb *tookBack) mover {
	return func(ctx context.Context, kind xferKind, id, key string, src, dst *node.Node) (bool, error) {
		applied, err := dst.Client().Exists(ctx, xferMarkerKey(id)).Result()
		if err != nil {
			return false, fmt.Errorf("%w: node %s: reading the marker of transfer %s: %v", ErrUnavailable, dst.Name(), id, err)
		}
		if applied == 0 && tb.resume {
			return false, nil // not carried yet: the step 3 after the bump moves it
		}
		if applied == 0 {
			a.log.Warn("topology: a counter came back with its node's data, and its destination holds no marker of its transfer: left as it is (no instance reads it there)",
				"node", src.Name(), "key", key, "transfer", id, "destination", dst.Name())
			tb.left = append(tb.left, topology.LeftCounter{Node: src.Name(), Key: key, Why: "no marker"})
			return false, nil
		}
		if a.inv.crash(ctx, "take-back") {
			return false, errCrashed
		}
		out, err := a.inv.runAt(ctx, src, xferTakeBackScript, tok, []string{key, xferKey(id)}, string(kind))
		if err != nil {
			return false, err
		}
		state, v, err := xferReply(src.Name(), xferTakeBackScript, out, xferTaken)
		if err != nil {
			return false, err
		}
		switch state {
		case xferNone:
			return false, nil
		case xferBusy:
			if tb.resume {
				return false, nil // step 3 moves it once its parts settle
			}
			a.log.Warn("topology: a stock hash came back with its node's data with units reserved: left as it is (the reconcilers settle its parts; its units are counted on its transfer's destination too)",
				"node", src.Name(), "key", key, "reserved", v[0], "transfer", id)
			tb.left = append(tb.left, topology.LeftCounter{Node: src.Name(), Key: key, Why: "units reserved"})
			return false, nil
		}
		a.log.Warn("topology: a counter came back with its node's data after its transfer: taken off it again (its destination holds its units)",
			"node", src.Name(), "key", key, "transfer", id, "destination", dst.Name())
		tb.took++
		return true, nil
	}
}
