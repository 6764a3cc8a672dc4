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
//	shardis:node     field epoch = the epoch token "E:fingerprint" ([Token]),
//	                 or "behind:" and the token for a node accepted
//	                 behind its peers ("A node that went back"); field
//	                 attempt = the record's attempt, which the accept
//	                 compares with the peers'
//	shardis:topology epoch, token, current (Topology JSON), prev (the
//	                 Topology of epoch E-1, or ""), phase
//	                 ([PhaseMigrating] or [PhaseStable]), at (the node's
//	                 clock at the write, seconds), attempt (the apply
//	                 that moved it to the token: [Change.Attempt]; none
//	                 for a first epoch, a record of a release before, or
//	                 one an instance wrote again after it was lost)
//
// A node moves only forward: none → E:fp at phase stable (the first
// instance to find no record anywhere, or an apply given the topology
// applied before ([Options.From]) once it is past its checks: a dry run or
// a refused apply writes nothing), or E:fp → E+1:fp' at phase
// migrating (the bump, by compare-and-set on E:fp), then migrating →
// stable at the same token. Nothing moves a node back. An accept fences
// a node behind its peers (E:fp → behind:E:fp), and only an apply moves
// it on from there.
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
//     current token, stable (an apply to another topology, the previous
//     one included, is refused while the current one is still migrating:
//     its step 3 would look for records and counters only at their homes
//     in the current topology, and those step 3 has not moved yet, or is
//     moving, would stay where they are; run the current one again until
//     it is stable); the driver finds nothing on the nodes the change
//     would leave out of reach ([Driver.Check]: e.g. a route added back
//     over other nodes while an earlier removal's counters sit where it
//     would not find them; a dry run stops here, and a refusal writes
//     nothing). A node whose record is lost under a stamp at the
//     current token ([Record.Lost]) is refused by name: an apply of the
//     current topology writes it again ("A lost record"). Order records
//     live away from their home (older
//     copies come back with a node's data) are marked moved
//     ([Driver.Retire]); nodes that join get the per-user limits of their
//     routes ([Driver.CopyLimits]).
//  2. Bump: each node, by compare-and-set on its token, moves to
//     "E+1:fp(new)" with prev = the old topology and phase migrating. From
//     the first node bumped, old-configuration instances are refused
//     there; an order that spans nodes at both epochs fails cleanly (no
//     part is taken at the wrong epoch). Once the old nodes are bumped,
//     before the joining ones, the limits are copied again: an old
//     instance could change one on the old nodes until their bump (a copy
//     never replaces a newer version, a change of the new topology).
//  3. Migrate ([Driver.Relocate], then [Driver.MoveCounters] until nothing
//     waits or [Options.Wait] passes): every order record whose home moved
//     is moved; every record still staging is decided at its new home;
//     every quota counter whose home moved and that no pending part still
//     counts is transferred exactly once; the stock of a node leaving a
//     route (the server, or that route only) is transferred once it holds
//     no reserved units; the leaving nodes' pending parts are settled
//     after their deadlines (one that cannot be settled is set aside there,
//     waited for, and named in [Moved.SetAside] until an operator settles
//     it). The inventory
//     package's epoch.go and migrate.go say why each move is safe.
//  4. Stable: phase stable on every node. Instances stop consulting the
//     previous topology. Written only once step 3 ran to its end in this
//     run.
//
// An interrupted apply is resumed by running it again: a node already at
// the new token is not bumped again, and every move of step 3 is
// idempotent (the driver's contract), so a rerun after a crash at any
// point applies no change twice. Before it bumps the nodes an interrupted
// bump left behind, it retires their stale records and puts back what
// step 3 had moved onto them ([Driver.Retire], "A node that went back"):
// such a node may have gone back to an older copy after the first run's
// retirement, and step 3 has not written it yet, so the rule of step 1
// still tells a stale record there. On those that went back (fenced, or
// below the epoch moved from) it also takes back what the change's
// transfers had moved off them, as a move forward does (below): the
// resume's own step 3 would finish those transfers once the node is
// bumped (their in a no-op on the destination's marker, their done
// subtracting the units again), but a concurrent apply of the same
// change whose step 3 had passed the node before it went back wrote it
// stable as soon as it was bumped, and then no run read it again: the
// units stayed on it, counted on their destination too (the schedule
// explorer's seed 168235: the resume died after its bump, or after its
// transfer's out on the node). Since step 4 writes a node stable only at
// the incarnation read before its step 3 began ("A copy taken during
// step 3"), that apply's step 4 refuses such a node (accepted since),
// unless the resume wrote it stable first, and the run after brings it
// forward or resumes: a counter the resume's take back left (busy: units
// reserved, or a quota counter pending parts hold, in the copy) is then
// moved by the resumed step 3 once its parts settle, or left and named
// by the move forward's take back, as any busy counter it finds; before,
// it stayed on the node reported nowhere
// (TestResumeBesideAConcurrentStep4NamesABusyCounter).
//
// A node that went back. A node restored from an older copy of its data
// and accepted (`shardis node accept`) may hold the record of an earlier
// epoch while every other node is stable at the current one:
// instances at the current token are refused there, so nothing on it can
// be decided, and its orders' parts elsewhere stay pending. An instance
// still at the node's older topology is not refused by the token, so the
// accept fences such a node (router.AcceptNode: its stamp's token
// becomes node.FencePrefix + token unless every peer holds the same
// token and attempt or an earlier epoch; a peer at a later epoch, at the
// same epoch at another token or attempt, or unreadable, fences it: two
// copies of one epoch cannot be ordered, the nodes' clocks not being
// trusted with it, so the accept fails closed; a fenced peer counts by
// the copy under its fence, so the accepts' order does not matter): no
// instance, at any topology, matches it, and Record.Fenced makes it no
// one's newest record. The apply takes the highest epoch as current (a
// fenced node by the copy under its fence, when it is above every
// unfenced one: a bump stopped after it, and it was accepted with a peer
// unreadable; the apply then resumes to it) and brings every fenced node
// of that epoch forward, retiring and putting back as for a node behind,
// but for a node fenced at the apply's own token and attempt, whose
// records are the apply's (a node that lost nothing but was accepted
// while a peer differed, or a copy taken during step 3): brought
// forward, nothing retired, what step 3 moved off it taken back ("A copy
// taken during step 3"); a node fenced at a
// later epoch than a change is never behind it. Copies that cannot be
// told apart are left to the operator: an apply attempt known on one
// side only is another attempt, and a fenced node whose record is lost
// (Record.Lost) makes the apply refuse until the record is restored. Two copies of one epoch among the unfenced nodes, or among the
// fenced ones when every node is fenced, make the apply refuse (ErrInvalid,
// naming them) rather than guess: the operator unfences, by hand, the
// nodes whose copy is current. What this cannot see: a node that went
// back without being refused (so never accepted, never fenced) while the
// nodes holding the current copy were all accepted and fenced is taken as
// current. Before, an
// instance of the older topology that could read only that node (a peer
// unreachable while it read the topology) took its epoch as current and
// cancelled an order there that the current topology's instances
// confirmed at its new home; and a node that went back to a copy from an
// earlier attempt of the same apply (every node went back below the
// epoch, and the same topology was applied again: the same token) was
// served at once, its stale records decided. Both found by a review;
// two more reviews found the first rules wrong: fencing on any difference
// with its forward retiring what a node fenced at the current copy held,
// and ordering two copies by the nodes' clocks failing with a clock
// running fast. So the apply
// is done only when every node of the current topology is at its token:
// running the apply of the current topology again sees every node at the
// token stable (step 3 ran to its end: stable is written only after it)
// and that node behind, and brings it forward: it retires what came back
// on it ([Driver.Retire], Change.Forward), then writes it the current
// topology's stable record by compare-and-set from the token it read,
// at the incarnation it read ("A copy taken during step 3")
// (Report.Forward). Only that node changes (a previous home's copy marked
// moved is read by marking it again, as it was), and the nodes that left
// with the last apply need not answer, nor be configured (they may be
// gone). Step 3 is not run again. What
// the node's older copy holds stays as it was, lost writes lost
// (SECURITY.md), but for the order records:
//   - one the earlier step 3 moved off it is live there again but never
//     read (not its home), until the next apply to a new topology retires
//     it before its bump (so a move of that order's home back onto the
//     node installs the order's current record, not the older one);
//   - one step 3 moved onto it (its copy at its previous home is marked
//     moved at the token) is put back from that copy: the node lost the
//     install, or holds an older copy of the order from before an
//     earlier move off it, which the put back replaces in place (never
//     retiring it first; the node remembers the put back, and no
//     retirement of the change marks what a put back wrote: two applies
//     bringing the node forward at once, or a rerun after a crash, keep
//     it). Retired as stale and left at that, the order
//     would have no live record anywhere, though its home's copy still
//     holds it: the inventory's explorer found that (seed 24412 of
//     `make explore PROFILE=crash TOPOLOGY=1 RESTART=0.3 LOSS=0.6`).
//     A rerun that resumes an interrupted bump puts them back the same
//     way before it bumps the nodes behind: step 3 at the token may have
//     run to its end on the others (a rerun does not run it again once a
//     node is stable at the token), or may move the order onto the node
//     again (its install then finds the record live and keeps it: the
//     same value).
//
// A marked copy whose order was reserved when it was moved (no TTL, as
// the order's live record keeps none while reserved) gets the records'
// retention once the install landed; others keep their own TTL. The
// retention is longer than any reservation: a put back by an apply run
// more than that after the install finds nothing for such an order,
// which came due and was decided at its new home long before, a decision
// lost with the node's writes. A copy left without that TTL (its
// expireMoved failed) is read by the move out's rule: undecided, it is
// put back no more once the record its install wrote may have lived out
// its retention (the inventory's apply_putback.go).
//
// Not put back (lost with the node's writes, SECURITY.md): a record whose
// previous home went back too (its mark went with its data); a record an
// earlier apply moved onto a node that went back to a copy older than
// that apply (only the marks of the token being finished are read); a
// record whose previous home left with the apply and is gone when the
// node is brought forward (then the node's older copy of it, if any, is
// kept, not retired: it is the only one left); and a record step 3
// installed on a node that went back to a copy taken after its bump, at
// the token in phase migrating, once another node is stable at the token:
// that node is not behind, so a rerun neither retires nor puts back
// anything on it, and does not run step 3 again.
//
// A transfer or a quota counter moved onto the node since the copy is
// gone. One moved off it by the apply being finished comes back with the
// copy, its units counted on its destination too: the move forward (or a
// resume, before it bumps the node) takes it off the node again
// ([Driver.Retire], Report.TakenBack) when the
// destination's marker shows the transfer applied (the inventory's
// apply_takeback.go; a counter an earlier apply moved off it stays, out of
// every instance's reach, until an apply would put it in play: below). An apply to a new topology still
// refuses while any node is at another token (its check): the current
// one is applied again first.
//
// A copy taken during step 3. A node's copy taken once it was bumped but
// before step 3 moved its counters and records comes back at the token,
// in phase migrating, at the same attempt as its peers: the accept does
// not fence it (nothing tells the copies apart), and it is not behind.
// Once step 3 has ended (a record at the token is stable: stable is
// written only after it) a rerun of the apply resumes (a record at the
// token is migrating), and its step 3 finds nothing to do (the inventory
// reads the phase of its view, stable); so the copy kept what step 3 had
// moved off the node, counted on the destination too (the schedule
// explorer's seeds 155100 and 155263: 26 units of a SKU where 14 were
// loaded). So an apply of the current topology that finds step 3 ended
// (a stable record at the token, or under a fence at it: stable is
// written only after step 3) never runs it again, nor bumps a node back
// to migrating (a rerun of step 3 over what instances did at the token
// since would install an order record's older copy over one that lived
// out its retention: found by a review). It brings forward every node of
// the topology not stable at the token (migrating at it, behind it, or
// fenced) with [Driver.Retire] and Change.Forward: what step 3 moved off
// a node at the token or fenced at it is taken back, as from a node that
// went back (only transfers whose destination holds the marker); a node
// behind is retired and put back as usual.
// Order records of a node at the token are left alone: instances at the token act
// on them, and a node whose data step 3 wrote whole (step 4 under way
// on it: stable written on some nodes, not yet on it) cannot be told
// from a copy; the take back finds each counter of such a node emptied
// by its transfer's done, and writes nothing. Not closed: order records
// step 3 moved off or onto the node after its copy was taken (a moved
// record live on it again, one installed on it lost).
//
// Such a copy may also come back, accepted unfenced, within one apply:
// once its step 3 has passed the node, before its step 4 writes it
// stable. Nothing in the node's record tells it from the node step 3
// wrote, so step 4 wrote it stable as it was: the counters step 3 had
// moved off it stayed there, counted on their destination too, and a
// rerun reported the topology applied (10 units of a SKU on both n2 and
// n3; TestStableRefusedOnACopyTakenDuringStep3AcceptedBeforeStep4). So
// step 4 writes a node stable only at the incarnation the apply read
// from it just before its step 3 began ([Record.Incarnation]: an accept
// gives the node a new one, router.AcceptNode), compared on the node in
// the script that writes (a record stable at the token already is left
// as it is). A node accepted since is refused, and the apply fails; its
// rerun finds step 3 ended (a node written stable before it) and brings
// the node forward, with the take back above, or, when no node was
// written stable yet, resumes, and its step 3 finishes the transfers
// off the node (the rerun rule). A node accepted since whose copy step
// 3 did see is refused too: its move forward finds nothing to take
// back.
//
// The move forward writes a node stable by the same rule: only at the
// incarnation the apply read from it before the driver's retire, put
// back and take back ([Driver.Retire] with Change.Forward; the records
// read first, in recs). A copy of the node taken before its take back,
// accepted once the take back ran (fenced as it was, or unfenced at the
// token, migrating), holds what the take back had subtracted, and its
// token is the one the forward read, so the compare-and-set alone
// passed: the forward wrote it stable as it was, the counters on it and
// on their destination (10 units of a SKU on both n2 and n3), and a
// rerun reported the topology applied
// (TestForwardRefusedOnACopyTakenBeforeItsTakeBackAccepted). Now the
// write is refused and the apply fails; its rerun reads the node again
// and brings it forward, taking the counters back off it. The rule, for
// every write of phase stable by an apply (step 4, a move forward, the
// repair of a lost record: "A lost record"): the node is written at the
// incarnation read before the last step that read or moved its counters
// began (for a repair, which moves none, the one read with the lost
// record), so no accepted copy older than that step is ever made stable;
// a rerun reads it again.
//
// Stale counters on a joining node. Counters the take back leaves (their
// transfer's marker gone, expired or never written; a stock hash with
// units reserved in the older copy; counters an earlier change than the
// last moved off the node) stay on a node that does not serve them: a
// stock hash of a route the node is no member of, a quota counter of a
// user whose home in the route is another node. No instance reads them,
// but their units are counted where the transfer put them. An apply that
// gives the node the route again (or makes it the user's home, or moves
// the counter from it in step 3) would serve them on top of those: stock
// sold twice, a count added twice. So, for every route whose members
// change, a counter with units (any of a stock hash's available,
// reserved, confirmed, loaded; a quota count) that the change would put
// in play (a stock hash on a node that joins the route; a quota counter
// on a node that is not its user's home in the old route, and is its
// home in the new one or an old member, whose counters step 3 scans) is
// stale unless the change's own transfer explains it: the node holds the
// marker of a transfer of that counter at the change's epoch
// (inventory: xferID(c.Epoch, …), written by the in step of an earlier
// attempt at the same token, which the same transfer's rerun finishes
// by the rerun rule). A stale one makes the apply refuse (ErrInvalid,
// naming node, route, key and units, telling the operator to delete it:
// its units are counted elsewhere, unless the node they moved to went
// back since too; with it the node's transfer records of it, and, for a
// stock hash, the units of it loaded on the route's other nodes, to
// compare with what the system of record says was loaded once it is
// deleted, the difference loaded again: 0 when the units may be counted
// nowhere else, or another node's own share of a SKU spread over
// several) before the run writes anything:
//   - a new epoch: in step 1 ([Driver.Check], a dry run too), on every
//     node of both topologies, all at the current token and stable;
//   - a rerun that resumes a bump, and a move forward: on the nodes
//     behind the change's epoch, before anything is retired on them
//     ([Driver.Retire]): their data predates their bump (they went back
//     since the check, or were never bumped), and nothing else reads
//     them before their bump or move forward. A stale quota counter is
//     only logged there: counted twice, a user's limit is stricter, never
//     an oversell, and refusing mid-apply would leave those nodes behind,
//     every order touching them failing, until an operator came. A move forward checks the
//     stock hashes only: it runs no step 3, so nothing is added to a
//     quota counter there (what the copy holds is read as it is, lost
//     writes, as for order records).
//
// The refused run wrote nothing, so the apply's state is the one an
// interrupt at that point leaves, which its rerun resumes; the rule
// reads only the node's own keys and the change's epoch, so every rerun,
// crash, concurrent apply of the same change and node already bumped
// (not read again: its data is from after its bump, which the check
// before it saw clean) gives the same answer. What it does not close: a
// node that goes back, after the check and before its own bump, to a
// copy at the current token taken while the last apply's step 3 was
// still to move the counter off it (bumped then, the node is not behind,
// and its stock is read as the new route's).
//
// A route removed and added back. An apply that removes a route moves
// none of its counters (no instance reads them until an apply adds the
// route back, which keeps those the new route finds where they are), and
// marks, in its step 3, each of the route's members in the old topology
// with its epoch (inventory: removedKey). When an apply adds the route
// back, step 1 ([Driver.Check]) reads the marks on every node of both
// topologies: a node holding counters of the route without the newest
// mark while another node has it came back with a copy of its data from
// before the removal (its units moved to a member by an earlier change,
// counted there too, or a member's with its later writes lost), and the
// apply refuses (ErrInvalid, naming node and keys: delete them, then load
// what the system of record says the route lacks). Without any mark (a
// removal by a release before the marks) the check is what it was: only
// counters the new route would not find refuse. What it does not close:
// every marked node going back to a copy from before the removal, an
// older mark then read as the newest.
//
// A lost record. A node whose stamp names the current token but whose
// record is gone (deleted by hand, a flush that kept the stamp:
// [Record.Lost]) is at the token, not behind it, but its phase, previous
// topology and attempt are unknown. An apply of the current topology
// writes it again (Report.Repaired): once every record read at the token
// is stable (step 3 ran to its end; a first epoch's records are written
// stable), it writes the token's stable record there (what the apply's
// last step writes on every node at the token) by compare-and-set at the
// token, before it brings any node forward; while one is still migrating,
// the apply resumes, and its last step writes it. Nothing is retired or
// put back on it, as on any node at the token. An instance restores it
// too, from a peer at the token. A lost record behind the current token,
// or a fenced one, tells no copy, and stays for the operator to restore.
// Both write it only at the incarnation read with the lost record
// (Record.Incarnation; the rule above): the node's copy taken during step
// 3 (at the token, migrating, what step 3 moved off it still there),
// restored and accepted unfenced between that read and the write, passed
// the compare-and-set on the token, and the write only moved its phase to
// stable: 10 units of a SKU on both n2 and n3, a rerun reporting the
// topology applied (the inventory's
// TestRepairRefusedOnACopyTakenDuringStep3AcceptedAfterTheRead and
// TestInstanceRepairRefusedOnACopyTakenDuringStep3AcceptedAfterTheRead).
// Now refused, the apply fails; its rerun reads the node
// migrating at the token and brings it forward, with the take back. Not
// closed: such a copy that holds no record itself (the record deleted by
// hand before the copy was taken; a flush that kept the stamp took the
// counters too) is read lost after its accept, at its new incarnation,
// and written stable as it is: a lost record tells no phase, so nothing
// tells it from a node that lost only its record after step 3.
//
// This package holds the protocol's steps and their order; a [Driver]
// (the inventory package's) holds what runs on the nodes: the record
// scripts and the moves. Apply never writes a node but through it.
package topology
