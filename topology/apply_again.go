package topology

import (
	"context"
	"fmt"
	"strings"
)

// An apply of the topology the nodes hold already: resume its apply while
// a record at its token is migrating, repair lost records, bring nodes
// that went back forward (doc.go).

// again runs an apply of the nodes' current topology (cur, the newest
// record; recs every node's): it resumes cur's apply while a record at
// its token is migrating and none is stable; once a record at the token
// (or under a fence at it) is stable (step 3 ran to its end: stable is
// written only after it; a record without a previous topology, a first
// epoch's, is only ever written stable), it
// writes the token's stable record again on the nodes that lost theirs
// under a stamp at the token (repair), then brings forward the nodes of
// cur's topology behind the token, fenced, or still migrating at it
// (forward), if any; with none,
// the topology is already applied. A node whose record is lost under
// another token's stamp, or fenced, refuses the apply before any write
// (lostElsewhere), as check refuses it on a new epoch's path.
func (a *applier) again(ctx context.Context, cur Record, recs map[string]Record) (Report, error) {
	a.rep.ToEpoch = cur.Epoch
	if !(cur.Phase == PhaseStable && allStable(recs, cur.Token)) && !stepThreeEnded(recs, cur.Token) {
		return a.resume(ctx, cur, recs)
	}
	// Step 3 ran to its end (a record at the token, or under a fence at
	// it, is stable): no step of it runs again. Nodes still migrating at
	// the token, behind it or fenced are brought forward (doc.go, "A copy
	// taken during step 3"): a bump back to migrating would let step 3
	// run again over what instances did at the token since (an order
	// record that lived out its retention installed again from an older
	// copy, its acknowledged cancel read as reserved: found by a review).
	// A node whose record is lost under another token's stamp, or
	// fenced, tells no copy (doc.go, "A lost record"): at a first epoch it
	// is neither given the epoch (firstEpoch) nor brought forward (nothing
	// moved), at a later one bringing it forward would retire by a guess
	// (the driver refuses: Driver.Retire), so the apply cannot finish.
	// Refused before any write (not even repair's), as check refuses it.
	var bad []string
	for _, name := range cur.Current.Nodes() {
		if r := recs[name]; r.Lost && (r.Fenced || r.Token != cur.Token) {
			bad = append(bad, lostElsewhere(name, r, cur))
		}
	}
	if len(bad) > 0 {
		return a.rep, fmt.Errorf("%w: %s", ErrInvalid, strings.Join(bad, "; "))
	}
	// lost records at the token: cur's stable record is theirs
	a.rep.Repaired = lostAt(recs, cur.Token)
	if !a.opts.DryRun {
		if err := a.initialise(ctx); err != nil {
			return a.rep, err
		}
		if err := a.repair(ctx, recs, cur); err != nil {
			return a.rep, err
		}
	}
	if (cur.Prev == nil && !anyFenced(recs, cur.Current.Nodes())) || (allAt(recs, cur.Current.Nodes(), cur.Token) && allStable(recs, cur.Token)) {
		a.rep.AlreadyApplied, a.rep.Phase = true, PhaseStable
		return a.rep, nil
	}
	return a.forward(ctx, recs, cur)
}

// resume finishes cur's apply (cur migrating, or a record at its token
// is): it retires what came back on the nodes its bump left behind,
// bumps them, and runs steps 3 and 4 (whose last writes give a node that
// lost its record under the token its record again).
func (a *applier) resume(ctx context.Context, cur Record, recs map[string]Record) (Report, error) {
	if cur.Prev == nil {
		// no apply of this release writes such a record (a record without
		// a previous topology is a first epoch's, or one an instance wrote
		// again, both stable): nothing tells what to resume from
		return a.rep, fmt.Errorf("%w: %s is at %s in phase %s with no previous topology, so the apply that moved it there cannot be resumed: set field prev of its %s to the topology of epoch %d (JSON) by hand, then run apply again",
			ErrInvalid, cur.Node, cur.Token, cur.Phase, "shardis:topology", cur.Epoch-1)
	}
	prev := *cur.Prev
	a.rep.FromEpoch, a.rep.From = cur.Epoch-1, prev
	var err error
	if a.attempt, err = attemptOf(recs, cur); err != nil {
		return a.rep, err
	}
	a.diff()
	if a.opts.DryRun {
		a.rep.Phase = PhaseMigrating
		return a.rep, nil
	}
	// An interrupted bump left nodes at the previous token (or one went
	// back to an older copy since): retire what came back on them, then
	// finish it (step 3 has not ended: again).
	if err := a.retire(ctx, cur.Token, behind(recs, Union(prev.Nodes(), a.to.Nodes()), cur.Token)); err != nil {
		return a.rep, err
	}
	prevTok := Token(cur.Epoch-1, prev.Fingerprint())
	if err := a.bump(ctx, recs, prevTok, cur.Token, cur.Epoch, prev); err != nil {
		return a.rep, err
	}
	return a.migrate(ctx, cur.Token)
}

// repair writes cur's stable record again, by compare-and-set at its
// token, on the nodes that lost theirs under a stamp at it
// (Report.Repaired): every record read at the token is stable, so step 3
// ran to its end there (or there is none: a first epoch), and the
// token's stable record is what the apply's last step writes on every
// node at it (migrate), the same as an instance's repair from a peer.
// Such a node is at the token, so it is not behind (Driver.Retire reads
// nothing of its data), and its record is then known. Each is written
// only at the incarnation read in recs (Record.Incarnation): a node
// accepted since may hold a copy of its record, at the token, migrating,
// taken during step 3 with the counters step 3 moved off it, which the
// compare-and-set alone would write stable as it is (doc.go, "A lost
// record"); refused, a rerun reads it migrating and brings it forward.
func (a *applier) repair(ctx context.Context, recs map[string]Record, cur Record) error {
	if len(a.rep.Repaired) == 0 {
		return nil
	}
	attempt, err := attemptOf(recs, cur)
	if err != nil {
		return err
	}
	for _, name := range a.rep.Repaired {
		// at the incarnation read (doc.go, "A lost record"): a node
		// accepted since may hold a copy taken during step 3, migrating
		rec := Record{Node: name, Epoch: cur.Epoch, Token: cur.Token, Current: cur.Current, Prev: cur.Prev, Phase: PhaseStable, Attempt: attempt, Incarnation: recs[name].Incarnation}
		if err := a.d.Write(ctx, name, cur.Token, rec); err != nil {
			return fmt.Errorf("writing %s's lost topology record again at epoch %d (run apply again to resume): %w", name, cur.Epoch, err)
		}
		recs[name] = rec
	}
	a.log.Warn("topology: wrote the lost topology record of nodes again", "epoch", cur.Epoch, "nodes", a.rep.Repaired)
	return nil
}

// forward brings the nodes of cur's topology that are behind its token
// to it when every node at the token is stable: step 3 ran to its end,
// and a node behind went back to an older copy of its data (doc.go, "A
// node that went back"). The driver first retires what came back on
// them and puts back what step 3 had moved onto them (Driver.Retire,
// c.Forward); then each is written cur's stable record by compare-and-set
// from the token read, and only at the incarnation read (Record.
// Incarnation, read in recs before the driver's Retire): a node accepted
// since may hold a copy of its data from before the take back, with the
// counters it had taken off it (doc.go, "A copy taken during step 3"),
// and the write refused, a rerun brings it forward again. No other node
// changes, and the nodes that left with cur's apply need not answer
// (they may be gone).
func (a *applier) forward(ctx context.Context, recs map[string]Record, cur Record) (Report, error) {
	for _, name := range cur.Current.Nodes() {
		if r := recs[name]; r.Token != cur.Token || (!r.Lost && r.Phase == PhaseMigrating) {
			a.rep.Forward = append(a.rep.Forward, name)
		}
	}
	a.rep.Phase = PhaseStable
	if a.opts.DryRun {
		return a.rep, nil
	}
	attempt, err := attemptOf(recs, cur)
	if err != nil {
		return a.rep, err
	}
	from := cur.Current // a first epoch's fenced nodes: nothing moved
	if cur.Prev != nil {
		from = *cur.Prev
	}
	c := Change{From: from, To: a.to, Epoch: cur.Epoch, Token: cur.Token, Forward: true, Attempt: attempt}
	c.Joined, c.Left = joinedLeft(c.From, c.To)
	if err := a.retireAt(ctx, c, a.rep.Forward); err != nil {
		return a.rep, err
	}
	for _, name := range a.rep.Forward {
		// with cur's Prev: a forwarded node read first as the newest record
		// must still tell a rerun that the apply is not done (run's switch);
		// at the incarnation read before the driver's retire, put back and
		// take back (doc.go, "A copy taken during step 3"): a node
		// accepted since may hold a copy from before its take back
		stable := Record{Node: name, Epoch: cur.Epoch, Token: cur.Token, Current: cur.Current, Prev: cur.Prev, Phase: PhaseStable, Attempt: c.Attempt, Incarnation: recs[name].Incarnation}
		if err := a.d.Write(ctx, name, recs[name].Token, stable); err != nil {
			return a.rep, fmt.Errorf("bringing %s forward to epoch %d (run apply again to resume): %w", name, cur.Epoch, err)
		}
	}
	a.log.Info("topology: nodes brought forward to the applied epoch", "epoch", cur.Epoch, "nodes", a.rep.Forward)
	return a.rep, nil
}
