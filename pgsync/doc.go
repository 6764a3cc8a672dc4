// Package pgsync lands the inventory's redo log in PostgreSQL: every
// deduction (part) exactly once, in offset order per (node, queue), with
// its current state. It is what `shardis sync` runs.
//
// # What it writes
//
// stock_movements holds one row per part: node, incarnation, queue,
// redo_offset, part_id, order_id, route, sku, quantity, state (pending,
// confirmed, cancelled; expired when the part's record outlived
// inventory.retention before it was read, never while the node lists the
// part pending or set aside; lost when its node lost it and
// was accepted with a new incarnation), reserved_at and settled_at (node
// clock), reason (of a cancelled row: cancelled, expired or refused, see
// [CancelReason]; NULL otherwise, or when the order's record could not
// be read), landed_at and updated_at. The primary key is (node,
// incarnation, queue, redo_offset), so a replay is a no-op, and (node,
// part_id) is unique, so a part is one row even when a node restored
// from a snapshot hands it out again under a new incarnation.
// Only parts of reservations have rows: an order refused without taking
// anything has no part (the inventory refuses an order that the nodes'
// counters show cannot be met before any take, inventory/soldout.go), and
// the parts of an attempt that took and was then refused are left out
// (below).
// sync_positions holds the committed position per (node, incarnation,
// queue); sync_incarnations every incarnation seen per node; sync_gaps
// every redo-log range trimmed before it landed (node, incarnation,
// queue, first_offset, last_offset, missing, found_at), written in the
// transaction that moves the position past it, so a loss is on record
// exactly when the position is ([Status] reads them);
// shardis_sync_schema the schema version ([Migrate]).
//
// # Refused attempts
//
// A Reserve attempt that takes parts and is then refused (it raced others
// for the last units, or lost its order to another attempt) gives them
// back within milliseconds; they never were a reservation, and they stay
// out of stock_movements. An entry at the head of a queue is, at each read:
//
//	held     its part is pending and was taken less than decide_wait ago
//	         ([Settings.DecideWait]) by its node's clock: the read stops
//	         the queue before it (inventory.ReadRedoBatch's hold, decided
//	         by the read script, so no other machine's clock counts), and
//	         the worker reads again once it is old enough;
//	skipped  its part is cancelled and its reason is refused (the order's
//	         record names another attempt, says the attempt failed or is
//	         still deciding, or is found on no node, every node read
//	         while the topology is stable, and no node that may be its
//	         home accepted with the data it went back to since a minute
//	         before the part was taken: a one-round attempt withdraws
//	         its record): no row, the position moves past it,
//	         shardis_sync_skipped_refused_parts_total counts it;
//	landed   otherwise, one row as before.
//
// Why no reservation is left out: a part is skipped only when it is
// cancelled (a cancelled part is never pending again) and its attempt is
// not the one its order's record holds as reserved, confirmed or
// cancelled by a user or by expiry (a Cancel of a record that never was
// reserved, failed or still reserving, writes reason "tombstone", as a
// Cancel before any record: refused too); an acknowledged reservation's record
// outlives its parts (inventory.retention) and keeps its token, so its
// parts are never read as a refused attempt's, and it is always found: a
// copy a topology change moved is read too (only for an attempt it
// decided for good: it is frozen at the move), as is a record found on a
// node that is not one of the order's homes (inventory.Inventory.OrderHomes:
// a leftover a restore or a rejoining node brought back, which may name an
// attempt the order has long moved past), and "no record" is concluded
// only from every node while the topology is stable (records sit on the
// applied members, which a ready instance's configuration names), and
// only while no node that may be the order's home was accepted
// (`shardis node accept`, its stamp's stamped_at) later than a minute
// before the part was taken (by its node's clock: acceptMargin bounds the
// skew): such a node went back to an older copy of its data, which may
// have lost the record of a reservation, cancelled by its user since
// (its part would have been left out: found by a review,
// TestCancelledReservationLandsAfterItsHomeWentBack); the part lands,
// reason unknown. A record that could not be read leaves the reason
// unknown and the part lands. What is left: a refused attempt whose giving back takes longer
// than decide_wait (its part's node was unreachable, the part waits for
// its deadline) lands as pending and later becomes a cancelled row with
// reason refused.
//
// # Unreadable part records
//
// A part record that is on its node but cannot be read (a key of another
// type, a packed record whose state code is none: corrupt data, repaired
// by hand) is never read as a part gone, which would land or settle its
// row as expired, a final state never revisited. Nor is a record gone
// while the node lists its part pending (the pending index holds the
// entry's place or the part's id) or set aside (the stuck index holds
// its id): the part was pending when its record was lost (deleted,
// evicted, lost with the node's writes), its units are reserved still,
// and once the record is repaired the reconciler settles it by its
// order's decision, perhaps confirmed (inventory/redolog.go, "What a trim
// removes"), or, set aside, an operator settles it by the route, SKU and
// quantity its row (or the order) holds (inventory.SettleStuckLost,
// `shardis parts settle --route R --sku S --qty N`): its record is then
// written settled, so its entry lands, or its row settles, in that state. Landed expired, its units would count neither held nor sold
// while the node held them, then sold. The node's reads report both alike
// (the settle pass reads each part with its row's place,
// inventory.PartStatesAt). Instead:
//
//	landing  the node's redo-log read (inventory.ReadRedoBatch) stops
//	         that queue before the entry (RedoQueueRead.Problem), as it
//	         stops before a held one: the queue lands up to it and waits
//	         there, nothing past it is landed or acknowledged; the node's
//	         other queues land as usual. The entry is logged (REDO ENTRY
//	         UNREADABLE: node, queue, offset, part, key, why) when it is
//	         first met or changes and every few minutes while it lasts,
//	         counted (shardis_sync_unreadable_queues) and shown by
//	         [Status] (QueueStatus.Problem); once the record reads again
//	         the queue lands on (logged once);
//	settling a landed pending row whose part reads unreadable
//	         (inventory.PartUnreadable) stays pending, logged alike (PART
//	         RECORD UNREADABLE: node, part, order, why) and counted
//	         (shardis_sync_unreadable_parts); the walk and the follow steps
//	         go on with the node's other rows. Once the record reads again
//	         the row follows it.
//
// # Guarantees
//
//   - One transaction per batch writes the rows and the positions; the
//     node's redo log is acknowledged (so Redis may trim it) only after the
//     commit, and the acknowledgement names the incarnation and the part
//     at the offset, so it never applies to other data. A sync killed at
//     any point resumes from the committed position: entries between the
//     commit and the acknowledgement are landed already and acknowledged
//     on restart. An acknowledgement that failed (the node did not
//     answer) is owed, and checked against the committed positions read
//     again from the database before it is retried: one past them (the
//     database lost the commit since: restored from a backup, an
//     asynchronous replica promoted) is dropped, never sent, and the
//     entries, still in the node's redo log, land again. So is one owed
//     past a position a landing reads lower under its locks. What no
//     check can see is a commit lost after its acknowledgement went
//     through (sent right after the commit, or a retried one sent right
//     after the check read the positions: the check and the
//     acknowledgement are two systems' steps): those entries are
//     trimmed, and recorded in sync_gaps when the position is read past
//     them.
//   - The schema is checked at start ([Connect]) and by every landing
//     and settle transaction, in statements they run anyway (no round
//     trip added): each takes the migration lock shared (tried, as the
//     queue locks are) and reads the version in a later statement, so a
//     migration commits either before the transaction, which then sees
//     it, or after it. The transaction that loads a node's positions (at
//     start, at a new incarnation) does the same, with one statement
//     more (it waits for the lock). A database migrated to another version while the
//     sync runs (a newer build's `shardis sync migrate`) stops every
//     worker before it writes: one error, naming both versions, is
//     logged, [Syncer.Err] returns it and [Syncer.DatabaseUp] (/healthz)
//     is false. (A worker that finds nothing to land or settle reads no
//     version: it writes nothing either.)
//   - A part landed while pending is re-read on its node once it settles
//     (below, "Settled states") until it is confirmed or cancelled; the
//     row is updated, never duplicated, and only while the incarnation
//     whose state the re-read found still holds it (held_by: a landing
//     that handed it to a later one meanwhile leaves it to the next
//     pass). States only move forward.
//   - A node at a new incarnation (it lost data and `shardis node accept`
//     took it back) gets positions of its own from offset 0; the change is
//     logged and counted (shardis_sync_new_incarnations_total). Pending
//     parts of the old incarnation that the node no longer holds become
//     lost. A part the node hands out again keeps its row: a lost row is
//     pending again (and re-checked against the incarnation that handed
//     it out, held_by), a settled row stays as it is, and another state
//     there is a conflict, logged and counted once per part and
//     incarnation (shardis_sync_conflicting_parts_total, conflict_in).
//   - A node that went back under the committed position without a new
//     incarnation (what rollback detection cannot see) pauses that queue,
//     logged and counted (shardis_sync_rewound_queues), instead of
//     skipping entries. A position past entries trimmed unread names
//     inventory.RedoPartTrimmed as its part, so an entry found there
//     later is the node gone back too. And the entry at the position,
//     once inventory.redo_max_age has trimmed it before an
//     acknowledgement reached it, counts as the landed one only while
//     the node holds that part's record there, or the one
//     SettleStuckLost wrote of it (inventory/redo_position.go): a node
//     gone back never took the part. Before, any entry gone
//     counted, so the max age, trimming the node's new entries up to the
//     position, resumed the paused queue past them, which never landed
//     nor were recorded in sync_gaps
//     (TestPausedQueueTrimmedByMaxAgeReportsWhatItPassed).
//   - A database or node outage pauses the affected nodes (nothing is
//     acknowledged, nothing skipped); each retries after retry_backoff,
//     or as soon as the database answers again. Whether it answers is
//     followed from every statement and a ping every second (every 200ms
//     while it does not): shardis_sync_database_up, [Syncer.DatabaseUp]
//     (the sync's /healthz), one line when an outage is seen and one when
//     it ends, with its duration.
//   - Several instances may run: each (node, queue) is landed under a
//     transaction-scoped PostgreSQL advisory lock and its position re-read
//     under it, and each node's settle pass under another. The locks are
//     tried, never waited for: a queue another session holds is skipped
//     (logged when that lasts over a second). A hung instance's session
//     holding them mid-transaction is ended by PostgreSQL after
//     idle_in_transaction_session_timeout ([Settings]), which releases
//     them.
//     An instance held up between its read and its landing (a pause, a
//     slow host) while the node was accepted again re-reads the node's
//     incarnation under the locks and drops what it read of the old one,
//     so another instance's rows of the new incarnation never get the old
//     incarnation's states written over them.
//   - Every queue a node holds is landed and acknowledged, also those
//     past this instance's inventory.redo_queues (the node was written
//     with a larger setting, or the service runs with more queues):
//     nothing waits unread because the setting changed (queues.go).
//     [Status] shows them too.
//   - At start (and at a new incarnation) each node's committed position
//     per queue, where landing resumes, is logged.
//
// # Settled states
//
// A row landed pending must follow its part when the part settles. Re-
// reading every pending row on its node every pass costs in proportion
// to how many are pending (in a sale with a long payment window, most of
// them, every second), so a node names each part that leaves pending in
// its settled log (inventory/settledlog.go: appended by the same script
// that writes the settled record, bounded, lost with the node's data).
// Per node, under the node's settle lock, one loop does:
//
//	follow  every settle_interval: read the log after this instance's
//	        cursor, re-read the parts it names that have a pending row,
//	        write the settled ones, commit, then move the cursor;
//	again   the parts a follow step read are looked for once more a step
//	        timeout plus a second later, with a later follow step;
//	walk    re-read every pending row, in chunks: at start, when entries
//	        after the cursor were trimmed before they were read or the
//	        log is not the one the cursor was in (SettledCursor.Advance),
//	        when the node is at another incarnation, and every
//	        settle_walk_interval.
//
// Why no settle is missed: a part's entry is written after its settled
// record, in the same script, so a re-read for the entry finds it
// settled. Its row either exists when the follow step looks (then it is
// written) or is landed later: by a landing that read the part after it
// settled (it lands settled), or by one that read it pending before the
// entry existed; that landing's step ends within the step timeout of its
// read, before the second look, which writes it. A cursor moves only past
// entries whose step committed; another instance that holds the lock
// meanwhile follows from its own cursor, and re-reading a part twice is
// harmless. A follower keeps at most about as many parts for their second
// look as the log keeps entries, and walks instead past that (more
// settles on one node within a step timeout). A follower that never read
// the log starts before the log's first entry at that moment, then walks:
// the walk covers every part that settled before. What the log cannot
// tell — entries trimmed unread, a node that went back to older data, a
// record that outlived its retention (read missing: expired; a record
// that is there but cannot be read, or gone while its part is listed
// pending or set aside, is not missing, above), a part
// settled by a release without the log, a landing held up past its step
// timeout — the next walk finds, at the latest settle_walk_interval
// later.
//
// It uses github.com/jackc/pgx/v5 (pgxpool), the standard PostgreSQL
// driver for Go: maintained, no cgo, native arrays for the unnest-based
// batch statements.
package pgsync
