package explore

import (
	"fmt"
	"time"

	"github.com/shardis/shardis/inventory"
)

// Options configures a schedule.
type Options struct {
	// Profile names the fault chances: "" (DefaultProbs), "stall"
	// (StallProbs), "calm" (CalmProbs), "crash" (CrashProbs) or "lossy"
	// (LossyProbs).
	Profile string
	// Mutations re-introduce known bugs (the explorer's self-check).
	Mutations []inventory.Mutation
	// Topology and Restart are the chances that a schedule has the
	// topology actor and the node-restart actor; a negative one is 0.
	// default: 0.2 and 0.15
	Topology, Restart float64
	// Limit is the chance that a schedule has the limit order o6 and its
	// retry; a negative one is 0, and then the schedule draws nothing for
	// it (its seeds run as they did before o6 was added).
	// default: 0.4
	Limit float64
	// Inline is the chance that a schedule has the inline-part order (one
	// item homed on its stock's node, with or without a user:
	// inventory/inline.go) and its retry, Confirm or Cancel; a negative
	// one is 0, and then the schedule draws nothing for it (its seeds run
	// as they did before it was added).
	// default: 0.5
	Inline float64
	// Loss is the chance that a schedule has the data-loss actor (one of
	// n1..n3 goes back to an older copy of its data and is accepted:
	// loss.go); a negative one is 0, and then the schedule draws nothing
	// for it (its seeds run as they did before it was added).
	// default: 0.15
	Loss float64
	// Moved is the chance that a schedule with the topology actor has
	// the moved order (moved.go): reserved at T0 by the topology actor,
	// its record moved to n4 by the apply of T1, confirmed or cancelled
	// there, and carried back by the removal of n4; in half of those with
	// the data-loss actor, the loss follows it (lossPlan.followReserve). A
	// negative one is 0, and then the schedule draws nothing for it (its
	// seeds run as they did before it was added).
	// default: 0.5
	Moved float64
	// Twin is the chance that a schedule with the topology actor or the
	// data-loss actor has a second operator (the twin actor, loss.go): it
	// reruns `shardis topology apply` of the newest record's topology
	// when the nodes are not all stable, racing the topology actor's
	// applies and the data-loss actor's re-apply (two resumes, or two
	// forwards of a node that went back, at once). Drawn only when above
	// 0 (its seeds run as they did before it was added otherwise).
	// default: 0 (off)
	Twin float64
	// Loss2 is the chance that a schedule with the data-loss actor has a
	// second one (loss2, loss.go): a node drawn among n1..n3 on its own,
	// so another node than the first's (two nodes go back, each accepted
	// and followed by its re-apply) or the same one again (it goes back a
	// second time once the first loss actor has ended, to a copy of its
	// own: taken after the first accept, or, in half the schedules, at
	// the schedule's start, past every write of the schedule). Drawn only
	// when above 0 (its seeds run as they did before it was added
	// otherwise).
	// default: 0 (off)
	Loss2 float64
	// Relimit is the chance that a schedule with the limit order o6 has
	// an operator who, after up to 5 picks of other calls, sets c/s's
	// per-user limit (6) to 2 or 3, below what o6 wants, on the retry's instance (relimit,
	// actors.go): an attempt of o6 may hold its quota and stock when a
	// retry meets the lower limit. Drawn only when above 0 (its seeds run
	// as they did before it was added otherwise).
	// default: 0 (off)
	Relimit float64
	// Shrink is the chance that a schedule with the topology actor has
	// its second apply go to T2 rather than back to T0 (world.go): n4
	// leaves the server and n3 leaves route c but stays for route d, in
	// one apply, with c's stock on both and c's parts on n3 (phase 1's
	// orders', o4's) in flight; the heal finishes T2, and c's stock must
	// all be on c's nodes of T2 (check.go, checkStranded). Drawn only
	// when above 0 (its seeds run as they did before it was added
	// otherwise).
	// default: 0 (off)
	Shrink float64
	// Rejoin is the chance that a schedule with the topology actor has
	// the rejoin (rejoin.go): once its second apply (T0, or T2 with
	// Shrink) returned, after a drawn number of picks of other calls (the
	// data-loss actor may roll n3 back to a copy holding route c's
	// counters and see it accepted meanwhile), the actor applies T1
	// again: n4 rejoins route c (with Shrink, n3 rejoins c and n4 the
	// server), and once that apply is stable an instance of T1 reserves
	// and confirms one more order of route c, which would sell units a
	// node brought back in its older copy if the apply served them. An
	// apply refused for those stale counters
	// (inventory.StaleCountersError) is a legitimate outcome, counted
	// (Result.RejoinRefused). Drawn only when above 0 (its seeds run as
	// they did before it was added otherwise).
	// default: 0 (off)
	Rejoin float64
	// Abandon is the chance per call that its caller stops waiting for it
	// and goes on while it is still on its way (the Abandon fate). Drawn
	// only when above 0 (its seeds run as they did before it was added
	// otherwise: a fate is one draw either way, and the chance takes what
	// was Deliver's).
	// default: 0 (off)
	Abandon float64
	// Clock is the chance that a schedule has the clock actor (clock.go):
	// one node's wall clock steps by up to ClockStep either way, once
	// or twice, while the other actors run, and every clock is set right
	// before the heal. Above 0 only in a world made for it (Explore makes
	// its worlds so when Config.Options.Clock is above 0; it needs gcc);
	// drawn only when above 0 (its seeds run as they did before it was
	// added otherwise).
	// default: 0 (off)
	Clock float64
	// ClockStep bounds one step of the clock actor. Above partGrace
	// (inventory, 1 s) expired stock may come back before its order's
	// deadline by some clock, which the checks allow; it must never be
	// sold twice (SECURITY.md, "Clock skew").
	// default: 300ms
	ClockStep time.Duration
	// OOM is the chance that a schedule has the memory actor (oom.go):
	// one of n1..n3 runs out of memory while the other actors send it 1
	// to 6 calls, refusing every script that may take memory. Drawn
	// only when above 0 (its seeds run as they did before it was added
	// otherwise).
	// default: 0 (off)
	OOM float64
	// Operator is the chance that a schedule has the operator actor
	// (operator.go): in each phase, at 1 to 3 rounds after drawn picks
	// of other calls, it lists the parts set aside on n1..n3 and follows
	// the documented procedure for each (SettleStuckLost with the values
	// of the schedule's plans for a part whose record is gone,
	// SettleStuck by its order's decision, RetryStuck when that is
	// refused), through an instance of the schedule, its calls scheduled
	// and faulted like any actor's; the heal then runs the same procedure
	// before each of its retries (heal.go). In half of those schedules the
	// record-loss actor deletes one or two pending part records of a node
	// (operator.go, evict), which only the operator settles. Drawn only
	// when above 0 (its seeds run as they did before it was added
	// otherwise).
	// default: 0 (off)
	Operator float64
	// Aside is the chance, in a schedule with the operator actor, of the
	// set-aside actor (aside.go): it hides the stock hash of route a's or
	// b's SKU on its node in phase 1, so its parts are set aside with
	// their records intact, expires (deletes) in phase 2, in seven
	// schedules of ten, the decided records of the orders whose pending
	// parts all wait set aside, then repairs the hash and retries the
	// SKU's parts: the operator meets parts whose order's record exists
	// (SettleStuck refused, RetryStuck) and parts whose order's record
	// is gone (SettleStuck by the system of record). Drawn only when
	// above 0 (its seeds run as they did before it was added otherwise).
	// default: 0 (off)
	Aside float64
}

func (o Options) probs() (Probs, error) {
	switch o.Profile {
	case "":
		return DefaultProbs, nil
	case "stall":
		return StallProbs, nil
	case "calm":
		return CalmProbs, nil
	case "crash":
		return CrashProbs, nil
	case "lossy":
		return LossyProbs, nil
	}
	return Probs{}, fmt.Errorf("explore: unknown profile %q (want \"\", \"stall\", \"calm\", \"crash\" or \"lossy\")", o.Profile)
}

func (o Options) withDefaults() Options {
	if o.Topology == 0 {
		o.Topology = 0.2
	}
	if o.Restart == 0 {
		o.Restart = 0.15
	}
	if o.Limit == 0 {
		o.Limit = 0.4
	}
	if o.Inline == 0 {
		o.Inline = 0.5
	}
	if o.Loss == 0 {
		o.Loss = 0.15
	}
	if o.Moved == 0 {
		o.Moved = 0.5
	}
	if o.ClockStep <= 0 {
		o.ClockStep = defaultClockStep
	}
	return o
}

// Result is one schedule's outcome.
type Result struct {
	Seed       int64    // the seed that drove the schedule's random choices
	Violations []string // empty: every check held
	// Excused counts the violations about the orders and counters a
	// node's accepted data loss exposed (loss.go): expected by design,
	// not failures.
	Excused int
	// Lost are the nodes the data-loss actor rolled back to an older copy
	// holding fewer writes than were acknowledged, then accepted.
	Lost []string
	// Applies counts the topology applies the schedule ran (actors',
	// re-applies after an accept, the heal's), Retired the stale order
	// records they retired, Reinstalled the records they put back on
	// a node that went back and TakenBack the counters they took back
	// from one (topology.Report): how often a schedule exercised the
	// retirement.
	Applies, Retired, Reinstalled, TakenBack int
	// Rejoins counts the topology actor's rejoin applies (Options.Rejoin)
	// that ran, RejoinStable those that returned stable, RejoinRefused
	// those refused for stale counters (inventory.StaleCountersError:
	// nothing written, the nodes stay where they were), and
	// RejoinInvalid those refused otherwise (topology.ErrInvalid). Stale
	// counts every apply of the schedule refused for stale counters (the
	// rejoin's, a re-apply's, the heal's) and StaleFound the counters
	// they named; StaleCleared the counters the heal deleted, as the
	// refusal tells the operator to, before applying again (heal.go).
	Rejoins, RejoinStable, RejoinRefused, RejoinInvalid int
	Stale, StaleFound, StaleCleared                     int
	// Operators counts the schedule's operator actors that ran
	// (Options.Operator), StuckListed the set-aside parts their listings
	// showed (a part once per listing), Operated the settles of theirs
	// that answered or whose outcome is unknown (SettleStuck,
	// SettleStuckLost), the heal's included: how often a run had
	// the operator meet a stuck part.
	// HealListed counts the parts the heal's operator listed (once per
	// pass: heal.go, settleAll).
	// Evicted counts the pending part records the record-loss actor
	// deleted (operator.go).
	Operators, StuckListed, Operated, HealListed, Evicted int
	// Expired counts the order records the set-aside actor expired
	// (aside.go), ExpiredPaid those of them confirmed, Verdicts what the operator's settles met, by
	// asideVerdict's names ("listed-gone": a listing showed a part the
	// expiry's 'gone' verdict set aside).
	Expired, ExpiredPaid int
	Verdicts             map[string]int
	// Frozen counts the order records marked moved left without a TTL on
	// the nodes at the schedule's end (inventory/migrate.go, expireMoved):
	// not a violation (nothing is lost), a key kept for good.
	Frozen int
	Trace  []string      // the scheduler's picks and fates, and crash points
	Log    []string      // what each actor was told
	Digest string        // of the trace's decisions: equal on every run of the seed that decided alike
	Took   time.Duration // wall time the schedule took
	Waited time.Duration // of Took, spent waiting for deadlines
}
