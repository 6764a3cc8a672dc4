package inventory

import (
	"context"
	"errors"
)

// Faults is the seam through which tests and the schedule explorer inject
// faults into one Inventory (Options.Faults) or one topology apply
// (ApplyOptions.Faults). Production code leaves it nil, which costs one
// nil check per script call and per crash point.
//
// Every script call the inventory sends to a node goes through Call, and
// every crash point of a protocol asks Crash. Implementations must be safe
// for concurrent use: one Inventory runs many calls at once.
type Faults interface {
	// Call runs one script call. It must call send at most once and return
	// what send returned, or an error of its own:
	//   - return before calling send: the call never reached the node
	//     (return an error that is not a Redis error reply, e.g. one
	//     wrapping ErrCrashed);
	//   - block before send: the call is delayed (reordered behind other
	//     actors' calls);
	//   - call send, then return an error that is not a Redis error reply
	//     (e.g. one wrapping ErrCrashed or context.DeadlineExceeded): the
	//     call ran but its reply was lost, so its outcome is unknown to
	//     the caller, as after a network failure;
	//   - return such an error at once and call send later, on another
	//     goroutine (or never): the caller stopped waiting while the call
	//     was on its way, as a caller whose deadline ran out while its
	//     group was under way (group.go, awaitGroup), and the call lands
	//     after whatever the caller does next. Its reply goes nowhere.
	Call(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error)
	// Crash reports whether the actor stops at the named crash point (see
	// CrashPoints); the step then returns an error wrapping ErrCrashed, as
	// if the process died between two scripts.
	Crash(ctx context.Context, point string) bool
}

// ScriptCall describes one script call for [Faults.Call].
type ScriptCall struct {
	Node   string   // the node's configured name
	Script string   // the script's name (e.g. "stage-take", "order")
	Write  bool     // whether the script may change the node
	Keys   []string // the Redis keys the script is given (KEYS), in order
	Args   []any    // the script's own arguments (after the header): strings, integers
}

// ErrCrashed is wrapped by errors of a step stopped by an injected fault
// ([Faults]): the actor is to be treated as dead from there on.
var ErrCrashed = errors.New("inventory: actor crashed (fault injected)")

// CrashPoints lists the crash points [Faults.Crash] is asked about: the
// topology protocol's ("bump" in package topology's Apply; "move-out",
// "install" (after a moved record's install, before its copy gets the
// retention), "xfer-out", "xfer-in" in migrate.go; "retire", after each stale record retired,
// and "reinstall", after each record put back, in apply_putback.go;
// "take-back", before the script that takes back a counter a move
// forward takes back, in apply_takeback.go; "removal-mark", after each
// node marked with a route's removal, in apply_readd.go) and
// one-round reservations' ("staged:…", staged_reserve.go).
var CrashPoints = []string{
	"bump", "move-out", "install", "xfer-out", "xfer-in", "retire", "reinstall", "take-back", "removal-mark",
	"staged:before", "staged:takes-only", "staged:stage-only", "staged:some-takes", "staged:before-commit",
	"staged:before-withdraw",
}

// crash asks the injected faults whether the actor stops at point.
func (inv *Inventory) crash(ctx context.Context, point string) bool {
	return inv.opts.Faults != nil && inv.opts.Faults.Crash(ctx, point)
}

// plainArgs is args with the values an argBox points to in their place
// (a string, an int64), as ScriptCall promises them.
func plainArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case *string:
			out[i] = *v
		case *int64:
			out[i] = *v
		default:
			out[i] = a
		}
	}
	return out
}

// Mutation names a known protocol bug that a [Faults] implementing
// [Mutator] may re-introduce, so that the schedule explorer can show it
// finds that bug (its self-check). Production code never sees one.
type Mutation string

// The mutations the explorer's self-check re-introduces.
const (
	// MutationStageTakeover: a stage overwrites an existing record (a
	// failed one of another token), and parts' deadlines come from the
	// instance's clock (safety issue item A1). reserveStaged sends it to
	// stageTakeScript as an argument (staged.go);
	// TestMutationStageTakeover* show it brings the oversell back.
	MutationStageTakeover Mutation = "stage-takeover"
	// MutationApplyLeavesStaging: topology apply writes stable with
	// staging records undecided (item A2).
	MutationApplyLeavesStaging Mutation = "apply-leaves-staging"
	// MutationXferNegativeZero: the transfer's done step writes part of
	// its change, then fails (item A3).
	MutationXferNegativeZero Mutation = "xfer-negative-zero"
	// MutationLimitWithdraw: a one-round attempt refused by a per-user
	// limit withdraws its stage even when the units that refused it may
	// be a late attempt's of the same order (limitMayBeOwn ignored), so
	// that attempt's stage lands and reserves the order the refusal
	// answered for.
	MutationLimitWithdraw Mutation = "limit-withdraw"
	// MutationFenceSkip: a refusal after reads whose units may be a late
	// attempt's of the same order (soldout.go, "Refusals behind a fence")
	// answers without writing its fence, so that attempt's stage lands
	// and reserves the order the refusal answered for.
	MutationFenceSkip Mutation = "fence-skip"
	// MutationInlineUnwritten: an order's decision writes its record
	// without first writing the records of its inline parts (inline.go,
	// "Written before it can vanish"), so part_get no longer finds them
	// once the record is decided: their settles meet nothing, and the
	// stock they hold stays reserved.
	MutationInlineUnwritten Mutation = "inline-unwritten"
	// MutationInstallInline: a record moved by a topology change is
	// installed as the local reserve wrote it, so its inline parts are
	// read from it wherever it lands (inline.go, "Read where written"):
	// moved back to the node whose part records were lost with an older
	// copy of its data, a lost part reads as pending, and deciding the
	// order moves another order's units.
	MutationInstallInline Mutation = "install-inline"
	// MutationRetireSkip: topology apply retires no stale order record
	// (apply_retire.go), so a record a node's older copy brought back,
	// live away from its home, is kept over the order's current one when
	// a move brings the order's home back onto that node (a record a put
	// back replaces is replaced still: apply_putback.go).
	MutationRetireSkip Mutation = "retire-skip"
	// MutationReinstallSkip: topology apply puts back no order record
	// step 3 had moved onto a node that then went back (apply_putback.go,
	// reinstall; nothing is planned, so the older copy there is retired
	// as any stale record), so the order is left with no live record,
	// or with the older copy kept there (its previous home gone), which
	// hides its decision.
	MutationReinstallSkip Mutation = "reinstall-skip"
	// MutationLimitUnfenced: a refusal by reads for a per-user limit
	// (soldout.go, shortSKU.refusal) answers with no write even when the
	// units the user holds may be a late attempt's of the same order,
	// taken before the limit was set or lowered, so that attempt's stage
	// lands and reserves the order the refusal answered for.
	MutationLimitUnfenced Mutation = "limit-unfenced"
	// MutationStockLeftOnly: topology apply moves the stock of a route
	// only off the nodes that leave the server (Change.Left), not off a
	// node that leaves the route but stays for another one
	// (apply_migrate.go, moveCounters), which keeps the route's units
	// for good, out of every instance's reach (fixed in 4dd7130).
	MutationStockLeftOnly Mutation = "stock-left-only"
	// MutationXferNoSource: a transfer's id names no source node
	// (migrate.go, xferID), so two nodes leaving one route in one apply
	// send the same stock key to the same home under one id, and the
	// first's applied marker turns the second's in into a no-op before
	// its done takes the units off its source: lost (fixed in 4dd7130).
	MutationXferNoSource Mutation = "xfer-no-source"
	// MutationStuckLostUnfenced: SettleStuckLost's script settles a part
	// that is no longer set aside, or whose record reads settled (no
	// 'notstuck' nor 'settled' refusal: stuck_settle_lost.lua), as the
	// stuck entry a settle left behind let a settled part through before
	// 252043a: an operator's settle run again after its answer was lost
	// settles the part a second time, moving its units twice.
	MutationStuckLostUnfenced Mutation = "stuck-lost-unfenced"
	// MutationStuckGoneCancel: the expiry (ResolveExpired) cancels a part
	// that meets no record of its order when it may have outlived it
	// (set aside before, or due the retention ago: the expire op's 'gone'
	// verdict), as an attempt that never landed, rather than leave it set
	// aside for an operator (stuck.go), as it did before the verdict: a
	// paid order whose record lived out its retention while its part was
	// set aside has that part's units sold again.
	MutationStuckGoneCancel Mutation = "stuck-gone-cancel"
)

// Mutator is implemented by a [Faults] that re-introduces mutations.
type Mutator interface {
	// Mutated reports whether m is re-introduced.
	Mutated(m Mutation) bool
}

// mutated reports whether the injected faults re-introduce m.
func (inv *Inventory) mutated(m Mutation) bool {
	mu, ok := inv.opts.Faults.(Mutator)
	return ok && mu.Mutated(m)
}
