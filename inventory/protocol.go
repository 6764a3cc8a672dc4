package inventory

// The Go side of the Lua protocol: every op name the Go code sends to a
// multi-op script and every status word a script replies with, typed, in
// one place. The scripts themselves (scripts.go, local.go, staged.go) spell
// the same words; a reply word not listed here is a malformed reply.

// orderOp is an op of orderScript (scripts.go documents each).
type orderOp string

const (
	opBegin  orderOp = "begin"  // start (or take over) a general-path attempt
	opCommit orderOp = "commit" // reserving/staging → reserved, with the parts
	opFail   orderOp = "fail"   // reserving/staging → failed (the attempt's own token)
	// opRelease is opFail for an attempt whose begin or stage was not
	// answered: where the order has no record, a failed one under the
	// caller's token, which the begin or stage meets if it lands later
	// (order_ops.go: releaseLease, releaseStaged).
	opRelease orderOp = "release"
	opConfirm orderOp = "confirm" // reserved → confirmed (cancelled when past its deadline)
	opCancel  orderOp = "cancel"  // → cancelled; a tombstone when there is no record
	opExpire  orderOp = "expire"  // the reconciler's look at a due part's order
	// opWithdraw deletes a staging record of the caller's token whose
	// attempt left nothing on any node (soldout.go).
	opWithdraw orderOp = "withdraw"
	// opFence writes a failed record under the caller's token where the
	// order has none: a refusal's fence (soldout.go).
	opFence orderOp = "fence"
)

// recStatus is the first word of orderScript's reply: the record's status
// after the op, or a verdict that is never stored.
type recStatus string

const (
	// Stored statuses (state.go).
	recReserving = recStatus(OrderReserving) // a general-path attempt holds the lease
	recStaging   = recStatus(OrderStaging)   // a one-round attempt staged it: decide it first (staged.go)
	recReserved  = recStatus(OrderReserved)
	recConfirmed = recStatus(OrderConfirmed)
	recCancelled = recStatus(OrderCancelled) // reason: ReasonCancelled, ReasonExpired or ReasonTombstone
	recFailed    = recStatus(OrderFailed)    // the attempt under the record's token took nothing for good

	// Verdicts.
	recBegun    recStatus = "begin"    // opBegin: this attempt now holds the record
	recMismatch recStatus = "mismatch" // opBegin: the id was used with other items or user
	recLost     recStatus = "lost"     // opCommit: the record is not this attempt's any more
	recMissing  recStatus = "missing"  // no record
	// recGone: opExpire found no record of a due part that may have
	// outlived it (set aside before, or due longer than the retention
	// less two seconds of clock skew ago), or one of another attempt begun at or after the part came
	// due (reason "another attempt"): nothing written, its decision
	// cannot be inferred (stuck.go).
	recGone recStatus = "gone"
)

// reasonAnotherAttempt is the reason of a recGone verdict whose order
// holds a record of another attempt begun at or after the part came due
// (stuck.go); "no record" ([ReasonNoRecord]) when it holds none.
const reasonAnotherAttempt DecisionReason = "another attempt"

// recStatuses are the words orderScript replies as its first word.
var recStatuses = []string{string(recReserving), string(recStaging), string(recReserved), string(recConfirmed),
	string(recCancelled), string(recFailed), string(recBegun), string(recMismatch), string(recLost), string(recMissing),
	string(recGone)}

// stageStatus is the first word of stageTakeScript's reply (staged.go).
type stageStatus string

const (
	stageStaged   stageStatus = "staged"   // the record is staged and the home's parts taken
	stageExisting stageStatus = "existing" // a record exists: nothing written
	stageShort    stageStatus = "short"    // the home cannot meet its parts: nothing written
)

// takeWord is the state word reserveScript replies per part (scripts.go):
// the part's state, or a refusal that wrote nothing.
type takeWord string

const (
	takePending            = takeWord(PartPending) // taken now (or, on a retry, taken before)
	takeNone      takeWord = "none"                // nothing available: nothing written
	takeLimit     takeWord = "limit"               // the user's quota is exceeded: nothing written
	takeElsewhere takeWord = "elsewhere"           // the quota's previous node's count is unknown: nothing written
)

// takeWords are the words reserveScript replies per part: the take
// words, and a part's settled state (a retry that found it settled).
var takeWords = []string{string(takePending), string(takeNone), string(takeLimit), string(takeElsewhere),
	string(PartConfirmed), string(PartCancelled)}

// probeWord is the state word probeScript replies per part (staged.go):
// the part's state, or what the probe found where there is no record.
type probeWord string

const (
	probePending             = probeWord(PartPending)
	probeAbsent    probeWord = "absent"    // inspect: no record, nothing written
	probeLost      probeWord = "lost"      // no record on a node of another incarnation: nothing written
	probePrevented probeWord = "prevented" // prevent: no record, a tombstone written
	// probeGone is not a script's reply: the part's node left the
	// topology, which is stable without it, and this instance no longer
	// has it (staged.go, "Parts on a node that left"): nothing was read
	// or written there.
	probeGone probeWord = "gone"
)

// probeWords are the words probeScript replies per part: a part's state
// where there is a record, else what the probe found.
var probeWords = []string{string(probePending), string(PartConfirmed), string(PartCancelled), string(probeAbsent),
	string(probeLost), string(probePrevented)}

// localStatus is the first word of localScript's reply (local.go).
type localStatus string

const (
	localReserved localStatus = "reserved" // the whole order is reserved
	localFallback localStatus = "fallback" // nothing written: take the general path
	localExisting localStatus = "existing" // the order has a record: nothing written, the general path answers
	localShort    localStatus = "short"    // no record, a part is short here: nothing written (soldout.go)
	// localLimit: no record, a quota part is over the user's limit:
	// nothing written; refused unless the units may be an attempt's of
	// the order (localOver, limitMayBeOwn)
	localLimit localStatus = "limit"
)

// settleMissing is what settleScript answers for a part its node does not
// hold (confirm); settleDone for a part it moved now; settleLost for a
// part whose record is gone while its node lists it (cancel or abort:
// nothing written, SettleNow).
const (
	settleMissing = "missing"
	settleDone    = "done"
	settleLost    = "lost"
)

// xferOutState is the first word of xferOutScript's and
// xferTakeBackScript's replies (migrate.go).
type xferOutState string

const (
	xferRecorded xferOutState = "recorded" // the transfer is recorded: its amounts follow
	xferTaken    xferOutState = "taken"    // (take back) the counter's units are subtracted: their amounts follow
	xferNone     xferOutState = "none"     // nothing to move: nothing written
	xferBusy     xferOutState = "busy"     // the stock hash has reserved units: nothing written
)
