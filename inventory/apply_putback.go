package inventory

import (
	"context"
	"fmt"
	"time"

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
// The states of such an order's record on its node N (behind), and the
// rules that keep every interleaving of applies safe, reruns after a
// crash and two forwards at once included:
//
//	absent or older ──put back──▶ newest, remembered ──N moves forward──▶ served
//	      │
//	      └──(no put back of the change landed)──retire──▶ marked moved
//
//   - a put back is remembered: order_install.lua with "replace" writes
//     the record and, in the same script, the node's memory of the put
//     back (putBackKey: the change's token, its apply's attempt and the
//     order), and a retirement of the change checks that memory in the
//     script that would mark the record (order_move_out.lua answers
//     "kept"). So no retirement of an apply ever marks what a put back of
//     that apply wrote, whatever it read and planned before: a node that
//     goes back to data older than the put back loses the memory with the
//     record.
//     The memory is named by the change's token and its apply's attempt
//     (memoryOf, topology.Change.Attempt): a token is the epoch and the
//     topology's fingerprint, so once every node went back below c.Epoch
//     an apply of the same topology runs at the same token, and a memory
//     an earlier attempt at it left on a node behind (written while the
//     node was behind, so kept by its older data, even by a copy taken
//     before the new attempt retired the record) would keep a record that
//     is stale by then (reviews found a lost Cancel that way, twice:
//     TestPutBackMemoryOfAnEarlierApplyIsVoid). It lives
//     putBackMemoryTTL, longer than the marked copies.
//   - planned first: Retire reads the plan (planPutBacks) before it
//     retires anything and passes a planned record over on its node; the
//     put back replaces it in place (its inline parts get their records
//     first, as at a retirement). A planned put back whose marked copy is
//     gone when it runs (expired after the retention since the plan read
//     it) retires the record instead, as Retire would have (retireOne,
//     which keeps one a put back wrote meanwhile).
//   - every put back writes the same value: the marked copy is read by
//     order_move_out.lua at c.Token, which marks it again as it was and
//     returns its value (what step 3's move read, without a TTL when
//     reserved); nothing writes a copy marked at c.Token, so every put
//     back installs the same value. One that finds that value answers
//     "exists" (not counted in Reinstalled: nothing changed).
//   - only while N is behind: each install and retirement runs at the
//     token read from N, which N refuses once it moved forward (or was
//     bumped), so neither overwrites what instances write after; until
//     then no instance at c.Token writes N (its scripts are refused
//     there).
//
// Before these rules the stale record was retired and the put back
// followed, and an order could be left with no live record: a second
// apply that had read N behind retired the record the first had put back,
// the first moved N forward, and the second's put back was refused at
// N's new token (TestConcurrentForwardsKeepThePutBack); or a rerun after
// a crash past the put back, once the marked copy's node had gone back
// too, planned nothing and retired the record put back
// (TestRerunKeepsWhatWasPutBack). Both were found by reviews with gated
// tests against real nodes.
//
// A node at another token than c.Token holds no mark at c.Token, and is
// not read further (markedHome): a record whose copy went back with its
// node before any put back of it landed is not put back (SECURITY.md).
// A node fenced at c.Token and c.Attempt (accepted while a peer differed
// or could not be read; its data is the apply's) is read like one at
// c.Token, its scripts run at the fenced token it holds: passing it over
// retired the older copy on the node that went back while the fenced
// node held the order's only newer record, confirmed, and a Cancel then
// undid the acknowledged Confirm (found by a review;
// TestPutBackFromAHomeFencedAtTheToken).
// A copy marked without a TTL (its order reserved) lives
// inventory.retention after its install landed (expireMoved), so a put
// back run later than that finds nothing for such an order, which came
// due and was decided long before (SECURITY.md). That TTL may never have
// been given (expireMoved failed at the move, a failure logged as
// harmless, and Retire gives none to a marked home at c.Token), or given
// by a move after the order came due, so a put back reads the copy as a
// move does (order_move_out.lua with the retention, ARGV 5): an undecided
// copy is put back no more once the record its install wrote may have
// lived out its retention at its new home (from the order's due, two
// part graces of clock skew told apart); the move out answers "none"
// (the copy given the retention if it has none) and the put back retires
// the older record as for a copy gone (putNoCopy). Past that the node's
// record may have been decided and expired there, with no loss of the
// node's writes; put back, the order came back reserved without a TTL,
// and the expiry of a part whose settle never landed cancelled a part of
// the paid order (TestPutBackOfACopyOutlivingItsRecordIsRefused). The
// order is then as one whose record lived out its retention (stuck.go:
// its parts go to an operator). Put backs of one apply stay one value:
// one written before that time is kept by its memory (retireOne), never
// retired by one refused after it.

// putBackOf is one planned put back: order id, whose copy on h is marked
// moved at the change's token, onto its home dest.
type putBackOf struct {
	h        *node.Node
	hTok     string // h's token: c.Token, or its fence at it (markedHome)
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
		h, hTok, err := a.markedHome(ctx, c, name)
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
			plan.list = append(plan.list, putBackOf{h: h, hTok: hTok, id: id, dest: to.Home(id)})
			plan.dest[id] = to.Home(id)
		}
	}
	return plan, nil
}

// reinstall runs plan's put backs, each at its destination's token in
// behind, and returns how many it installed and how many records it
// retired: a planned put back whose marked copy is gone by the time it
// runs (it expired after the retention since the plan read it), or is
// undecided and past the records' retention (this file's doc), retires
// the record Retire kept on its promise, as Retire would have (retireOne:
// not a record a put back of the change wrote meanwhile).
func (a *migrator) reinstall(ctx context.Context, c topology.Change, plan putBackPlan, behind map[string]string) (put, retired int, err error) {
	for _, p := range plan.list {
		got, err := a.putBack(ctx, c, p, behind[p.dest])
		if err != nil {
			return put, retired, fmt.Errorf("putting back order %q on %s from its moved copy on %s (run apply again to resume): %w", p.id, p.dest, p.h.Name(), err)
		}
		switch got {
		case putNoCopy:
			ok, err := a.retirePlanned(ctx, c, p, behind[p.dest])
			if ok {
				retired++
			}
			if err != nil {
				return put, retired, err
			}
		case putWritten:
			a.log.Warn("topology: order record put back from its moved copy: its node went back to data from before the apply moved it there",
				"node", p.dest, "order", p.id, "from", p.h.Name())
			put++
			if a.inv.crash(ctx, "reinstall") {
				return put, retired, errCrashed
			}
		}
	}
	return put, retired, nil
}

// retirePlanned retires the record on p.dest (at its token tok) that
// Retire passed over for put back p, whose marked copy is gone (retireOne,
// keeping one a put back of the change wrote meanwhile), and reports
// whether it marked it; crash point "retire" follows, as after any
// retirement, and [MutationRetireSkip] skips it (test-only, faults.go).
func (a *migrator) retirePlanned(ctx context.Context, c topology.Change, p putBackOf, tok string) (bool, error) {
	if a.inv.mutated(MutationRetireSkip) {
		return false, nil
	}
	n, err := a.node(p.dest)
	if err != nil {
		return false, err
	}
	ok, err := a.retireOne(ctx, memoryOf(c), n, tok, p.id)
	if err != nil {
		return false, fmt.Errorf("retiring the stale record of order %q on %s, its moved copy on %s gone (run apply again to resume): %w", p.id, p.dest, p.h.Name(), err)
	}
	if !ok {
		return false, nil
	}
	a.log.Warn("topology: stale order record retired: its moved copy is gone, or undecided past the records' retention, so it was not put back",
		"node", p.dest, "order", p.id, "from", p.h.Name())
	if a.inv.crash(ctx, "retire") {
		return true, errCrashed
	}
	return true, nil
}

// memoryOf names what a put back of change c leaves on its node
// (putBackKey): c's token and attempt (topology.Change.Attempt), so a
// memory left by another attempt at the same token never counts.
func memoryOf(c topology.Change) string { return c.Token + "/" + c.Attempt }

// markedHome returns the node named name, a member of c.From, and the
// token it holds, when it is at c.Token, or fenced at c.Token and
// c.Attempt (its records are the apply's: accepted while a peer differed
// or was unreadable; it keeps its marks at c.Token), nil when it is not:
// only then can it hold copies marked moved at c.Token.
func (a *migrator) markedHome(ctx context.Context, c topology.Change, name string) (*node.Node, string, error) {
	h, err := a.node(name)
	if err != nil {
		return nil, "", err
	}
	rec, err := readRecord(ctx, h)
	if err != nil {
		return nil, "", err
	}
	if rec.Token == c.Token || (rec.Fenced && rec.Held == c.Token && rec.Attempt == c.Attempt) {
		return h, rec.Token, nil
	}
	return nil, "", nil
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

// putOutcome is what a put back did.
type putOutcome int

const (
	putWritten putOutcome = iota // the record written on its node
	putHeld                      // the node held that record already (put back by a concurrent or earlier run)
	putNoCopy                    // nothing written: the copy is no longer marked at the change's token, or is undecided past the records' retention
)

// putBack installs order p.id's record, marked moved at c.Token on p.h,
// on the node p.dest at its token destTok, replacing the live record it
// may hold and remembering the put back there (this file's rules), and
// says what it did: putNoCopy too when the copy is undecided and its
// record may have lived out its retention (this file's doc).
func (a *migrator) putBack(ctx context.Context, c topology.Change, p putBackOf, destTok string) (putOutcome, error) {
	h, id, tok := p.h, p.id, c.Token
	// with the retention: an undecided copy past its record's retention
	// is put back no more (this file's doc)
	out, err := a.inv.runAt(ctx, h, orderMoveOutScript, p.hTok, []string{orderKey(id)}, tok, seconds(a.inv.cfg.Retention))
	if err != nil {
		return putNoCopy, err
	}
	m, err := decodeMoveOut(h.Name(), out)
	if err != nil || !m.moved {
		return putNoCopy, err
	}
	n, err := a.node(p.dest)
	if err != nil {
		return putNoCopy, err
	}
	keys := []string{orderKey(id), putBackKey(memoryOf(c), id)}
	reply, err := a.inv.runAt(ctx, n, orderInstallScript, destTok, keys, m.pttl, m.rec, "replace", a.putBackMemoryTTL())
	if err != nil {
		return putNoCopy, err
	}
	installed, err := decodeInstall(n.Name(), reply)
	if err != nil {
		return putNoCopy, err
	}
	if m.frozen {
		a.inv.expireMoved(ctx, h, p.hTok, tok, id)
	}
	if !installed {
		return putHeld, nil
	}
	return putWritten, nil
}

// putBackKey is the key of a node's memory of a put back of order id by
// the apply memory names (memoryOf): a transfer marker
// ([KeyTransferMarker], the same family as a counter transfer's: a record
// moved onto the node once) named by memory, "putback" and the order
// key. It lives putBackMemoryTTL.
func putBackKey(memory, id string) string {
	return xferMarkerKey(memory + "|putback|" + orderKey(id))
}

// putBackMemoryTTL is how long a node remembers a put back (s): the
// longer of xferMarkerTTL and inventory.retention, so it outlives the
// marked copies it was read from, and any wait an interrupted apply is
// expected to have before its rerun.
func (a *migrator) putBackMemoryTTL() int64 {
	return max(int64(xferMarkerTTL), int64(a.inv.cfg.Retention/time.Second))
}
