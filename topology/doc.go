// Package topology is the inventory server's membership (its routes, their
// nodes and weights: a [Topology]) and the protocol that changes it
// ([Apply]): epochs that keep every membership change single-decision.
//
// Where an order record lives (the node a minted id names, or the home
// ring over every inventory node) and where a user's quota counter lives
// (each route's ring) depend on the topology. A configuration that adds or
// removes a node moves some of them. Two instances that place the same
// order on two nodes could both decide it, so every node records which
// topology it belongs to and every script refuses a caller that acts
// under another one.
//
// # States
//
// Every inventory node holds (written only by the topology scripts):
//
//	shardis:node     field epoch = the epoch token "E:fingerprint" ([Token])
//	shardis:topology epoch, token, current (Topology JSON), prev (the
//	                 Topology of epoch E-1, or ""), phase
//	                 ([PhaseMigrating] or [PhaseStable]), at (the node's
//	                 clock at the write, seconds)
//
// A node moves only forward: none → E:fp at phase stable (the first
// instance to find no record anywhere), or E:fp → E+1:fp' at phase
// migrating (the bump, by compare-and-set on E:fp), then migrating →
// stable at the same token. Nothing moves a node back.
//
// # The rule
//
// An instance acts only at the token of the nodes' newest record, and only
// with the placement of that record's topology, whatever its own
// configuration says. The prelude of every inventory script compares the
// caller's token with the node's and refuses with SHARDIS_EPOCH otherwise,
// atomically with the script's reads and writes. So at any moment at most
// one topology can act on a node, and every instance that acts places
// orders, quotas and stock alike. An instance whose configuration differs
// from the applied topology (a rolling deploy before `shardis topology
// apply`) keeps serving the applied one and reports the pending
// difference ([Diff]); one that cannot serve it (a node it needs is
// missing from its configuration) changes nothing anywhere (the
// inventory package's served.go).
//
// # The apply
//
// Epochs move forward only by [Apply] (`shardis topology apply`):
//
//  1. Check: every node of the old and new topology answers and is at the
//     current token; order records live away from their home (older
//     copies come back with a node's data) are marked moved
//     ([Driver.Retire]); nodes that join get the per-user limits of their
//     routes ([Driver.CopyLimits]).
//  2. Bump: each node, by compare-and-set on its token, moves to
//     "E+1:fp(new)" with prev = the old topology and phase migrating. From
//     the first node bumped, old-configuration instances are refused
//     there; an order that spans nodes at both epochs fails cleanly (no
//     part is taken at the wrong epoch).
//  3. Migrate ([Driver.Relocate], then [Driver.MoveCounters] until nothing
//     waits or [Options.Wait] passes): every order record whose home moved
//     is moved; every record still staging is decided at its new home;
//     every quota counter whose home moved and that no pending part still
//     counts is transferred exactly once; a leaving node's stock is
//     transferred once it holds no reserved units; the leaving nodes'
//     pending parts are settled after their deadlines. The inventory
//     package's epoch.go and migrate.go say why each move is safe.
//  4. Stable: phase stable on every node. Instances stop consulting the
//     previous topology. Written only once step 3 ran to its end in this
//     run.
//
// An interrupted apply is resumed by running it again: a node already at
// the new token is not bumped again, and every move of step 3 is
// idempotent (the driver's contract), so a rerun after a crash at any
// point applies no change twice. Before it bumps the nodes an interrupted
// bump left behind, it retires their stale records ([Driver.Retire]):
// such a node may have gone back to an older copy after the first run's
// retirement, and step 3 has not written it yet, so the rule of step 1
// still tells a stale record there.
//
// A node that went back. A node restored from an older copy of its data
// and accepted (`shardis node accept`) may hold the record of an earlier
// epoch while every other node is stable at the current one:
// instances at the current token are refused there, so nothing on it can
// be decided, and its orders' parts elsewhere stay pending. So the apply
// is done only when every node of the current topology is at its token:
// running the apply of the current topology again sees every node at the
// token stable (step 3 ran to its end: stable is written only after it)
// and that node behind, and writes it the current topology's stable
// record by compare-and-set from the token it read (Report.Forward).
// Only that node is written: the nodes that left with the last apply
// need not answer, nor be configured (they may be gone). Step 3 is not
// run again, so this only makes the node usable; what
// its older copy holds stays as it was, lost writes lost
// (SECURITY.md): a record the earlier step 3 moved off it is live there
// again but never read (not its home), until the next apply to a new
// topology retires it before its bump (so a move of that order's home
// back onto the node installs the order's current record, not the older
// one), and a transfer or a quota counter moved onto it since the copy is
// gone. An apply to a new topology still
// refuses while any node is at another token (its check): the current
// one is applied again first.
//
// This package holds the protocol's steps and their order; a [Driver]
// (the inventory package's) holds what runs on the nodes: the record
// scripts and the moves. Apply never writes a node but through it.
package topology
