package inventory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shardis/shardis/node"
	"github.com/shardis/shardis/router"
	"github.com/shardis/shardis/topology"
)

// Topology epochs, as an instance meets them. The protocol (the records
// every node keeps, the rule, the steps of an apply) is the topology
// package's doc; this file is how one instance follows it, and what its
// moves (migrate.go, apply_migrate.go) rely on.
//
// An instance acts only at the token of the nodes' newest record, and only
// with the placement of that record's topology (served.go), whatever its
// own configuration says. The prelude of every script (lua.go) compares
// the caller's token with the node's and refuses with SHARDIS_EPOCH
// otherwise. An instance whose configuration differs from the applied
// topology keeps serving and reconciling the applied one, reports the
// pending difference, and moves to the new topology by itself once it is
// applied (it rereads the nodes when a script is refused, and every
// resyncEvery while it is not ready, migrating or has a change pending;
// a reread that could read no node at all keeps the last view read, and
// one a not-ready instance's caller cut short is not kept: resync).
// Timing never decides safety here: a view is only ever a guess that
// every script checks against its node's token.
// An instance that cannot serve the applied topology (a node it needs is
// missing from its configuration) changes nothing anywhere: [New] refuses
// it, and a running one answers [ErrTopology] and reports not ready.
//
// Step 3 of an apply, as this package runs it ([migrator]): every order
// record (tombstones included) whose home moved is moved (below); every
// record still staging (a one-round reservation whose attempt died before
// its commit, staged.go) is decided at its new home, its absent parts
// prevented (decideStaging in apply_migrate.go: a promised part may be on
// a leaving node, which no new instance can probe); every quota counter
// whose home moved and that no pending part still counts is transferred
// exactly once; a leaving node's stock is transferred to its route once it
// holds no reserved units. No instance of the new topology reaches a
// leaving node, so the apply itself settles the leaving nodes' pending
// parts, each after its deadline, by its order's decision (as the
// reconciler does); until then Confirm and Cancel count them in
// PendingParts. Every move is idempotent: order moves by the moved mark
// and install-unless-live; staging records are decided once by
// compare-and-set; transfers by the rerun rule in migrate.go.
//
// Moving an order record (migrate.go). While the phase is migrating, an
// instance that needs order X whose home moved from A (prev) to B (new)
// first runs "move out" on A: a record there is marked moved (its data
// kept, frozen: nothing acts on a moved record) and returned; then
// "install" on B writes it unless B already holds a live record. Only
// then does it act on B. Why no order is decided twice: after the bump no
// script at the old token runs anywhere, so A's record can only change by
// being marked moved; B acts only after the install, and the install never
// overwrites a live record, so every mover installs the same frozen data
// and the first one wins. A record that did not exist on A when B was
// checked cannot appear on A later (no one may create it there at E+1).
// A copy marked at E+1 is moved again by each mover (its install may not
// have landed), but an undecided one not once B's record may have lived
// out its retention: order_move_out.lua.
// A moved mark left from an older epoch is dead: install overwrites it and
// the order script deletes it and reads no record, every op exactly as
// where the key never was. Such a copy sits on the order's home when an
// apply moves the home back onto a node whose copy outlived the live
// record (a failed expireMoved, then expireFrozen), and the order id may
// be reserved again there. Read otherwise (reviews found both), the
// expire op cancelled a part of a confirmed order past the retention
// instead of meeting 'gone' (stuck.go), and the expire and release ops
// left no failure where they write one for no record, the fence a late
// stage of the part's attempt meets (staged.go): the stage staged the
// emptied key and Reserve answered success for units sold again
// (order.lua, SECURITY.md). The move out writes the records of
// the record's inline parts on A first, and the install gives a record the
// local reserve wrote a reserved_at, so no copy of it is read for inline
// parts again (inline.go, "Read where written").
//
// Quota counters follow the same idea with a transfer record
// (migrate.go): out (record the amount on the source), in (add it on the
// destination once per transfer id), done (subtract it on the source).
// Between in and done the units count twice, which can only refuse an
// order, never oversell. While migrating, a reserve counts what the
// user's previous quota node still holds as well (read before the
// reserve; it can only fall, since nothing takes quota there any more).
//
// Stock needs no move: a joining node starts empty (load stock onto it);
// a node's counters of a route it leaves (leaving the server, or that
// route only) are transferred to the route's home of the SKU by the same
// transfer records.

// view is an immutable snapshot of what an instance acts on: the epoch
// token and the placement of the applied topology (served.go).
type view struct {
	placement
	token     string
	epoch     int64
	phase     topology.Phase
	notReady  error // nil when the instance may act
	prevHomes *Homes
	prevRoute map[string]*router.Ring // route → ring of the previous epoch
	read      time.Time
	// unread: the read that made this view could read no node at all
	// (none of them answered within the reread's budget, none of them
	// DOWN), so nothing was learned. resync then keeps the previous view
	// if it was ready, marked unread, instead.
	unread bool
}

func (v *view) migrating() bool {
	return v.notReady == nil && v.phase == topology.PhaseMigrating && v.prevHomes != nil
}

// topoState holds the instance's view and serialises rereads.
type topoState struct {
	// turn is held (one token in it) while rereading the nodes; a caller
	// waiting for it gives up when its context ends (resync). Made by
	// New.
	turn chan struct{}
	cur  atomicView
	self topology.Topology
	fp   string
	// noInit: never write a first record (set before first use).
	noInit bool
}

// resyncEvery bounds how often a not-ready or refused instance rereads the
// nodes, and how long a migrating view lives before it is reread.
const resyncEvery = 250 * time.Millisecond

// A reread may take rereadReady while the instance is ready (a reread
// that reads no node keeps the last view, so a short one costs nothing)
// and rereadNotReady while it is not (its callers are refused until a
// read succeeds: a longer wait beats a refusal, and the first read of a
// new instance on a busy host took more than a second). Either is cut by
// the caller's context.
const (
	rereadReady    = time.Second
	rereadNotReady = 3 * time.Second
)

// errTopologyUnread is the view before the nodes were read.
var errTopologyUnread = fmt.Errorf("%w: %w: topology not read from the nodes yet", ErrUnavailable, ErrTopology)

// topology returns the view pinned on ctx (served.go), or the current
// view, rereading the nodes first when the view is not ready, migrating
// or has a configuration change pending, and is older than resyncEvery.
func (inv *Inventory) topology(ctx context.Context) *view {
	if v, ok := inv.pinned(ctx); ok {
		return v
	}
	v := inv.topo.cur.Load()
	if (v.notReady == nil && v.phase == topology.PhaseStable && v.pending == "") || time.Since(v.read) < resyncEvery {
		return v
	}
	return inv.resync(ctx, v)
}

// staleTopology marks the view for a reread at the next call (a script was
// refused with SHARDIS_EPOCH).
func (inv *Inventory) staleTopology() {
	v := *inv.topo.cur.Load()
	v.read = time.Time{}
	if v.notReady == nil {
		v.phase = topology.PhaseMigrating // forces a reread without refusing
	}
	inv.topo.cur.Store(&v)
}

// resync rereads the nodes unless another caller did since old was read.
// A caller whose context ends while another caller rereads gets the view
// as it is then. A not-ready instance's reread that the caller's own
// context cut short, having read no node, is not kept: it says nothing of
// the nodes, and kept it made every caller in the next resyncEvery refuse
// without a read (a ready instance keeps its last view then, below).
func (inv *Inventory) resync(ctx context.Context, old *view) *view {
	select {
	case inv.topo.turn <- struct{}{}:
	case <-ctx.Done():
		return inv.topo.cur.Load()
	}
	defer func() { <-inv.topo.turn }()
	if v := inv.topo.cur.Load(); v != old {
		return v
	}
	budget := rereadReady
	if old.notReady != nil {
		budget = rereadNotReady
	}
	rctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	v := inv.readView(rctx)
	if v.unread && old.notReady != nil && ctx.Err() != nil {
		return v
	}
	v = inv.keepLastView(old, v)
	inv.topo.cur.Store(v)
	inv.logView(old, v)
	return v
}

// keepLastView returns v, the view a reread made, or, when that reread
// learned nothing (v.unread) and old was ready, old marked unread.
func (inv *Inventory) keepLastView(old, v *view) *view {
	if v.unread && old.notReady == nil {
		// Nothing was learned: keep acting on the last view read. It is
		// as safe as a stable instance that never rereads, or one paused
		// since its last read: every script compares the caller's token
		// with its node's (lua.go), so a view the nodes moved past is
		// refused with SHARDIS_EPOCH and reread. Refusing instead made an
		// instance that rereads (migrating, a change pending, a script
		// refused) answer unavailable whenever every node was slower than
		// the reread's second, though they still served its calls.
		if !old.unread {
			inv.log.Warn("inventory: could not reread the topology; acting on the last view read", "epoch", old.epoch, "reason", v.notReady)
		}
		kept := *old
		kept.read, kept.unread = v.read, true
		return &kept
	}
	if !v.unread && old.unread && v.notReady == nil {
		inv.log.Info("inventory: topology read again", "epoch", v.epoch)
	}
	return v
}

// logView logs what changed from view old to v: not ready (or another
// reason), the topology acted on, a pending change.
func (inv *Inventory) logView(old, v *view) {
	if v.notReady != nil && (old.notReady == nil || old.notReady.Error() != v.notReady.Error()) {
		if held := errors.Is(v.notReady, node.ErrHeldBack); held && !errors.Is(old.notReady, node.ErrHeldBack) {
			// Every node restarted (a start of the whole stack): they are
			// served once the hold ends (health.hold_back), in a moment.
			// Logged once, not at each countdown of the hold.
			inv.log.Info("inventory: waiting for the nodes held back after a new server process", "reason", v.notReady)
		} else if !held {
			inv.log.Error("inventory: not acting on the nodes", "reason", v.notReady)
		}
	} else if v.notReady == nil && (old.notReady != nil || old.token != v.token || old.phase != v.phase) {
		inv.log.Info("inventory: topology", "epoch", v.epoch, "phase", string(v.phase), "topology", v.applied.String())
	}
	if v.notReady == nil && v.pending != "" && (old.notReady != nil || old.pending != v.pending) {
		inv.log.Warn("inventory: "+v.pending+": serving the applied topology until `shardis topology apply` runs",
			"epoch", v.epoch, "applied", v.applied.String(), "config", inv.topo.self.String())
	}
}

// TopologyStatus reports the instance's view of the topology, rereading
// the nodes when it is not ready.
func (inv *Inventory) TopologyStatus(ctx context.Context) topology.Status {
	v := inv.topology(ctx)
	st := topology.Status{Epoch: v.epoch, Phase: v.phase, Fingerprint: inv.topo.fp, Ready: v.notReady == nil, Pending: v.pending}
	if v.notReady != nil {
		st.Reason = v.notReady.Error()
	}
	return st
}

// readView reads the record of every reachable node of this instance's
// configuration and decides the view: the newest record's token and the
// placement of its topology (served.go). Members of that topology without
// a record are given it (a new or accepted node); when no node has any
// record, the reachable ones are initialised at epoch 1 with this
// instance's topology.
func (inv *Inventory) readView(ctx context.Context) *view {
	now := time.Now()
	recs, unread := inv.readRecords(ctx, inv.nodes)
	if inv.repairLost(ctx, recs, len(unread) == 0) {
		recs, unread = inv.readRecords(ctx, inv.nodes)
	}
	newest := topology.Newest(recs)
	notReady := func(format string, a ...any) *view {
		return &view{read: now, notReady: fmt.Errorf("%w: %w: "+format, append([]any{ErrUnavailable, ErrTopology}, a...)...)}
	}
	if newest == nil {
		if err := allDown(inv.nodes, unread); err != nil {
			return &view{read: now, notReady: err}
		}
		for _, r := range recs {
			if r.Fenced {
				return notReady("every inventory node read is fenced (accepted behind a peer's topology): run `shardis topology apply` with the current configuration")
			}
		}
		v := notReady("no inventory node could be read (%s)", strings.Join(unread, "; "))
		v.unread = true
		return v
	}
	if newest.Epoch == 0 && inv.topo.noInit {
		return notReady("no node has a topology record")
	}
	if newest.Epoch == 0 {
		first := topology.Initial(inv.topo.self)
		for _, r := range recs {
			if err := inv.writeRecord(ctx, r.Node, "", first, ""); err != nil {
				return notReady("initialising the topology on %s: %v", r.Node, err)
			}
		}
		return inv.readView(ctx)
	}
	pl, err := inv.place(newest.Current, newest.Epoch)
	if err != nil {
		return &view{read: now, notReady: err}
	}
	inv.spreadRecord(ctx, recs, newest, pl)
	v := &view{placement: pl, token: newest.Token, epoch: newest.Epoch, phase: newest.Phase, read: now}
	for _, r := range recs {
		if r.Token == newest.Token && r.Phase == topology.PhaseStable {
			v.phase = topology.PhaseStable // stable is written only once everything moved
		}
	}
	if v.phase == topology.PhaseMigrating && newest.Prev != nil {
		if err := v.setPrevious(newest.Prev); err != nil {
			return notReady("%v", err)
		}
	}
	return v
}

// spreadRecord gives the newest record to every member of its placement
// pl that has none (a new or accepted node) and logs each member that is
// at another epoch or lost its record.
func (inv *Inventory) spreadRecord(ctx context.Context, recs []topology.Record, newest *topology.Record, pl placement) {
	applied := map[string]bool{}
	for _, n := range pl.members {
		applied[n.Name()] = true
	}
	for _, r := range recs {
		switch {
		case !applied[r.Node]:
			// Only this configuration has it: it joins at the apply.
		case r.Lost:
			inv.log.Error("inventory: node lost its topology record and no node can restore it", "node", r.Node, "token", r.Token)
		case r.Epoch == 0 && !inv.topo.noInit:
			if err := inv.writeRecord(ctx, r.Node, "", *newest, ""); err != nil {
				inv.log.Warn("inventory: could not give a node the topology record", "node", r.Node, "err", err)
			}
		case r.Token != newest.Token:
			inv.log.Error("inventory: node is at another topology epoch: it refuses this instance until `shardis topology apply` is run again",
				"node", r.Node, "node_epoch", r.Epoch, "epoch", newest.Epoch)
		}
	}
}

// setPrevious gives a migrating view the homes and route rings of the
// previous topology prev (where records and stock may still be).
func (v *view) setPrevious(prev *topology.Topology) error {
	var err error
	if v.prevHomes, err = homesOf(*prev); err != nil {
		return fmt.Errorf("previous topology: %v", err)
	}
	v.prevRoute = map[string]*router.Ring{}
	for route, ms := range prev.Routes {
		if v.prevRoute[route], err = router.NewRing(ms); err != nil {
			return fmt.Errorf("previous topology route %s: %v", route, err)
		}
	}
	return nil
}

// readRecords reads the records of nodes, skipping unusable ones (their
// names and reasons are returned), in nodes' order. The nodes are read at
// once, each within ctx: read one after another, a node slow to answer
// used up the reread's second (resync) and left the others unread, so a
// loaded machine made an instance refuse every call ("no inventory node
// could be read") though one answer was enough.
func (inv *Inventory) readRecords(ctx context.Context, nodes []*node.Node) (recs []topology.Record, unread []string) {
	type read struct {
		rec topology.Record
		ok  bool   // rec was read
		why string // else why not
	}
	reads := make([]read, len(nodes))
	atOnce(len(nodes), func(i int) {
		n := nodes[i]
		if !n.Usable() {
			reads[i].why = inv.unusableReason(n)
			return
		}
		r, err := readRecord(ctx, n)
		if err != nil {
			reads[i].why = err.Error()
			return
		}
		reads[i].rec, reads[i].ok = r, true
	})
	for i, rd := range reads {
		if !rd.ok {
			unread = append(unread, nodes[i].Name()+": "+rd.why)
			continue
		}
		recs = append(recs, rd.rec)
	}
	return recs, unread
}

// writeRecord writes rec on the named node by compare-and-set on expect
// (see topoWriteScript), at the node's incarnation inc ("" any): an
// instance writes a peer's record, read with the peer's incarnation, so
// rec's own is not the node's.
func (inv *Inventory) writeRecord(ctx context.Context, name, expect string, rec topology.Record, inc string) error {
	n, err := inv.r.Node(name)
	if err != nil {
		return err
	}
	rec.Incarnation = inc
	return writeRecord(ctx, inv, n, expect, rec)
}

// allDown returns an error wrapping ErrUnavailable and node.ErrDown,
// naming the nodes, when every inventory node is DOWN (the topology could
// not be read because no node is up, not because the nodes disagree);
// nil otherwise. unread are readRecords' reasons, one per node. When every
// node is only held back after a new server process (a start of the whole
// stack), it wraps node.ErrHeldBack too: a wait of a moment, not an
// outage (logView).
func allDown(nodes []*node.Node, unread []string) error {
	if len(nodes) == 0 {
		return nil
	}
	for _, n := range nodes {
		if n.State() == node.StateUp {
			return nil
		}
	}
	if len(nodes) == 1 {
		var why any = strings.Join(unread, "; ")
		if err := nodes[0].DownReason(); err != nil {
			why = err
		}
		return fmt.Errorf("%w: %w: %s is the only inventory node: %v", ErrUnavailable, node.ErrDown, nodes[0].Name(), why)
	}
	if allHeldBack(nodes) {
		return fmt.Errorf("%w: %w: %w: every inventory node is held back (%s)",
			ErrUnavailable, node.ErrDown, node.ErrHeldBack, strings.Join(unread, "; "))
	}
	return fmt.Errorf("%w: %w: every inventory node is down (%s)",
		ErrUnavailable, node.ErrDown, strings.Join(unread, "; "))
}

// allHeldBack reports whether every node of nodes is DOWN only because it
// is held back after a new server process (node.ErrHeldBack).
func allHeldBack(nodes []*node.Node) bool {
	for _, n := range nodes {
		if !errors.Is(n.DownReason(), node.ErrHeldBack) {
			return false
		}
	}
	return true
}

// refuse returns why the instance may not act at v (an error wrapping
// ErrUnavailable: the nodes are down, or ErrTopology), nil when it may.
func (v *view) refuse() error {
	if v.notReady != nil {
		return v.notReady
	}
	return nil
}

// repairLost writes the record again on nodes that lost it (Lost): from a
// node holding the same token, or, when none does and every node of this
// instance's configuration was read (allRead), from this instance's own
// topology if the token's fingerprint is this topology's (the token
// proves it; written as stable, with no previous topology or apply
// attempt: a migration under way when every node lost its record is not
// resumed, run topology apply again). A node that could not be read may
// hold the record whole (its previous topology, its phase, its attempt):
// written from the configuration meanwhile, a record lost during a
// migration would read stable, and the node would never be repaired from
// its peers (it is no longer lost). Each node is written only at the
// incarnation it was read at (topoWriteScript): one accepted since may
// hold a copy of its record taken during step 3, migrating at the token
// with the counters step 3 moved off it, which a peer's stable record
// would make stable as it is (topology doc.go, "A lost record"). It
// reports whether it wrote anything.
func (inv *Inventory) repairLost(ctx context.Context, recs []topology.Record, allRead bool) bool {
	wrote := false
	for _, r := range recs {
		if !r.Lost || r.Fenced { // a fenced node's copy cannot be told: Retire refuses it
			continue
		}
		var src *topology.Record
		for i := range recs {
			if !recs[i].Lost && !recs[i].Fenced && recs[i].Token == r.Token {
				src = &recs[i]
				break
			}
		}
		epoch, fp, ok := topology.SplitToken(r.Token)
		var err error
		switch {
		case src != nil:
			err = inv.writeRecord(ctx, r.Node, r.Token, *src, r.Incarnation)
		case allRead && ok && fp == inv.topo.fp && !inv.topo.noInit:
			err = inv.writeRecord(ctx, r.Node, r.Token, topology.Record{Epoch: epoch, Token: r.Token, Current: inv.topo.self, Phase: topology.PhaseStable}, r.Incarnation)
		default:
			continue
		}
		if err != nil {
			inv.log.Warn("inventory: could not restore a node's topology record", "node", r.Node, "err", err)
			continue
		}
		inv.log.Warn("inventory: restored a node's lost topology record", "node", r.Node, "token", r.Token)
		wrote = true
	}
	return wrote
}
