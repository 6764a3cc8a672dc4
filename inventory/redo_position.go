package inventory

// A consumer's position. A consumer keeps, per queue, the last offset P
// it landed and the part at it ([RedoCursor]; [RedoPartTrimmed] when the
// entry was trimmed before it read it). Every read and acknowledgement
// that names the position checks, in its script, that the queue still
// holds that part at P (redo_holds of lua/redo_holds.lua, the one place
// this is decided): the node may have gone back to older data under the
// same incarnation (what rollback detection cannot see) and handed P out
// again to another part, and a read past P would then skip the new
// entries up to P. The states of P, and what each means:
//
//	head below P        the node went back
//	entry at P          holds when it names the part; another: went back
//	entry gone, P acked the queue's acknowledged offset at the node's
//	                    incarnation is P or past it: the entry was
//	                    trimmed after an acknowledgement of it, the
//	                    landed one: holds
//	entry gone, unacked trimmed by the max age (redo_max_age > 0), the
//	                    landed part's entry or one the node handed out
//	                    at P after it went back: holds only when the
//	                    landed part's record is on the node and names
//	                    the queue and P (or is there and cannot be read:
//	                    its key is), or is one SettleStuckLost wrote
//	                    (stuck_since and no place: the operator's values
//	                    name no queue or offset, and no take time, so the
//	                    max age trims its entry at once), since a node
//	                    gone back under P never took that part
//	position "trimmed"  holds while no entry is at P (one there came
//	                    after the node went back: trimming never brings
//	                    an entry back)
//
// Why a queue gone back stays seen: its acknowledged offset is below P
// (an acknowledgement past the head is refused, and the copy's are its
// own), and every acknowledgement of P is refused by this same rule,
// while an entry at P names another part and once the max age has
// trimmed it; so the queue reads as gone back until the node is accepted
// (a new incarnation, a new position). Before, an entry gone read as the
// landed one: with redo_max_age > 0 a pgsync queue paused as gone back
// resumed once the max age trimmed the new entries up to P, and the
// reservations at the offsets between the copy's head and P never
// landed, nor were they recorded as trimmed unlanded
// (TestPausedQueueTrimmedByMaxAgeReportsWhatItPassed).
//
// Why a SettleStuckLost record counts: that script writes only for a part
// the node lists set aside (its stuck index, fed from its pending index,
// which only the node's own takes fill), so the node took the part: a
// copy from before the take lists nothing of it, and one from after it
// holds its entry at P (its head is at P or past it). Not covered: a part
// taken again on a node gone back (a retried take of the same id) at
// another offset, whose record is then lost and settled that way. A
// tombstone names no place either and does not count: a cancel writes one
// for a part the node does not hold, as on a node gone back that lost it.
// Before, such a record did not count: a sync whose acknowledgement of a
// part settled that way was cut and retried after a trim paused the queue
// as gone back (TestSettledLostPositionTrimmedBeforeItsAckIsNoRewind,
// TestPositionAtAPartSettledLostHoldsOnceTrimmed).
//
// What it cannot tell: a landed position whose acknowledgement is still
// owed when its part's record expires (its retention after the part
// settled; the max age, whatever its value, trims an entry whose record
// is gone at once) reads as gone back too: the queue waits, reported,
// until the node is accepted. Not covered: a position "trimmed" (its
// entry trimmed before the consumer read it: the max age already lost
// it) on a node gone back under it, once the max age trimmed the entries
// handed out again up to P: no part is there to look up, and the
// consumer's own acknowledgement of such a position is what the rule
// must accept (nobody acknowledged P before it), so the queue resumes
// past them unreported.
