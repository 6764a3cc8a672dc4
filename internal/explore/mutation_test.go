package explore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
)

// The explorer's self-check: with a known bug re-introduced (through the
// schedules' Faults, inventory.Mutator) the explorer finds a failing seed
// among n schedules of seeds seed, seed+1, … (or of the seeds a case
// lists), and that seed passes without the mutation. Each case names the
// profile and actors that reach its bug (none but inline-unwritten's has
// the inline-part order, none but retire-skip's the moved order, none but
// stock-left-only's and xfer-no-source's the shrink of route c, which
// came later: their seeds draw as they did before them); none scripts the
// bug's interleaving.
//
// install-inline (a record moved away and back around its node's data
// loss is installed so that its inline part is still read from it) is
// not among them either: with PROFILE=calm TOPOLOGY=1 INLINE=1 LOSS=1
// MOVED=-1 the explorer finds it in 2 of 450 schedules (seeds 17074 and 17415 of
// 17000 to 17449), too rare for a bounded look.
// TestInlinePartLostAfterMoveBack (inventory/inline_test.go) drives it
// directly. Nor is reinstall-skip (an apply's rerun retires a record its
// step 3 had moved onto a node that went back, and does not put it back
// from its moved copy): with PROFILE=crash TOPOLOGY=1 RESTART=0.3
// LOSS=0.6 the explorer finds it in 1 of 100 schedules (seed 24412 of
// 24400 to 24499).
// TestApplyPutsBackWhatStep3MovedOntoANodeThatWentBack
// (inventory/apply_reinstall_test.go) drives it directly.
//
// Where the first seed that finds a bug lies far from 1, the case starts
// a couple of seeds ahead of it (seed): the look is bounded in time
// (mutationBudget), and a loaded machine gets through only part of it
// (18 schedules in a minute under -race with one of the two cores busy
// elsewhere, where apply-leaves-staging's first find from seed 1 is the
// 22nd), so a look from seed 1 passed or failed with the machine's load.
// From a start just ahead, the first round of schedules holds a find,
// and the later ones hold more should it not repeat; the self-check still
// asks what it asked: that these schedules, unchanged, find the bug.
// Where the finds are too sparse for that (limit-withdraw), the case
// lists the seeds that found it, and the look runs those.
//
// A1 (stage-takeover: a lost reply leaves o1 failed; the retry's takes
// land, its stage is parked past the deadlines; a reconciler cancels the
// takes; the stage takes over the failed record and the retry is
// acknowledged without its parts) is no longer among them: the explorer
// still finds it, but now in about 2 % of schedules (PROFILE=lossy
// TOPOLOGY=-1 RESTART=-1 LIMIT=-1 INLINE=-1: 5 of 240 in three runs, 0
// of 90 in one of them, 0 of 48 in a -race run on a loaded machine), too
// rare for a bounded self-check, like fence-skip (README).
// TestMutationStageTakeoverOversells and
// TestMutationStageTakeoverConfirmsRefusedHold (inventory/
// staged_late_test.go) drive its interleavings directly on real nodes.
var mutationCases = []struct {
	m     inventory.Mutation
	opts  Options // the actors and fault chances that can reach the bug
	seed  int64   // the first seed to look at
	seeds []int64 // instead of seed: the seeds to look at, in order
	n     int     // schedules to look at (with seeds: 0 for all)
}{
	// A3: the transfer of the leaving node's stock writes part of its
	// change, then fails (20 of seeds 1 to 30 find it, the first at 2;
	// again 20, 2 4 5 8 12-20 22-24 26 27 29 30, under -race on
	// 2026-12-06). In two runs of make test that day (-race, the other
	// packages beside it) 2 did not find it and 4 did, in the look's
	// second round, 2 minutes into its 3: the look starts at 4, whose
	// first round holds 4 and 5 (both found it under -race at load 5,
	// and 6 did not).
	{inventory.MutationXferNegativeZero, Options{Profile: "calm", Topology: 1, Restart: -1, Limit: -1, Inline: -1, Loss: -1, Moved: -1}, 4, nil, 20},
	// A2: the topology actor's order dies after its stage landed (a
	// crash-point fate), and the removal of n4 writes stable with its
	// record staging, promising a part on n4. Seeds 22 and 25 of the
	// first 40 find it. Before the topology actor drew pauses before its
	// applies, 9 of seeds 41 to 100 did too; now 165 and 187 are the next
	// (4 of seeds 1 to 200, each a schedule without a pause before the
	// removal): a pause lets o9's commit end before the removal begins.
	// In two runs of make test on 2026-12-06 the look from 20 found it
	// only at 25, in its second round (22 did not); each of the four
	// found it alone under -race at load 5 (165 and 187 in about a
	// second, waiting for no deadline), and none of them fails without
	// it. The look is those four, 25 first.
	{inventory.MutationApplyLeavesStaging, Options{Profile: "crash", Topology: 1, Restart: -1, Limit: -1, Inline: -1, Loss: -1, Moved: -1}, 0,
		[]int64{25, 165, 187, 22}, 0},
	// A limit refusal withdrawn: o6's first attempt takes its quota and
	// its stock, its stage is held back; the retry's stage lands, its
	// quota part is refused by the first attempt's units, it withdraws
	// its stage and answers limit exceeded; the held stage lands and the
	// order ends reserved by units taken before the retry began. Seeds 15,
	// 49 and 60 of the first 80 find it in a run without -race (15, 17,
	// 49, 60, 67 before each schedule drew how one-round commits travel;
	// again 15, 49 and 60 of seeds 1 to 64 on 2026-12-01). On 2026-12-04,
	// 49, 60, 67, 128, 176, 253 and 295 of seeds 1 to 300 did (chaos
	// beside it), and 49, 60 and 67 did again under -race with the
	// explorer's crash profile beside; a look from 13 reached 19
	// schedules in a CI run under load, and 15 did not find it there. A
	// look from 49 reached 9 schedules in a CI run beside an explorer and
	// a chaos run (2026-12-05), and 49 did not find it there: the look is
	// those seven seeds, so every schedule a loaded machine gets through
	// is one that found it.
	{inventory.MutationLimitWithdraw, Options{Profile: "calm", Topology: -1, Restart: -1, Limit: 1, Inline: -1, Loss: -1, Moved: -1}, 0,
		[]int64{49, 60, 67, 128, 176, 253, 295}, 0},
	// An inline part left without a record by its order's decision
	// (inventory/inline.go): the inline-part order is confirmed, cancelled
	// or expired, and its part's settle finds nothing (20 of seeds 1 to
	// 30 find it).
	{inventory.MutationInlineUnwritten, Options{Profile: "calm", Topology: -1, Restart: -1, Limit: -1, Inline: 1, Loss: -1, Moved: -1}, 1, nil, 10},
	// A stale record kept (topology.Driver.Retire marks nothing): the
	// moved order's T0 home goes back, after the order's decision at T1,
	// to its record as it was before the move; the removal of n4
	// installs the decided record over it, finds it there and keeps it,
	// and the order ends failed though its Reserve answered success. 8 of
	// seeds 1 to 60 found it, the first at 2, while the removal could
	// start with the addition still migrating; since that is refused
	// (topology's check), 7 of seeds 1 to 140 did: 19, 41, 57, 58, 80, 114
	// and 129; since a put back replaces the older record in place
	// (inventory/apply_putback.go) and the applies bump the current
	// nodes first, 3 of seeds 39 to 142 do: 57, 80 and 114 (the look from
	// 39 reached only 16 schedules in a loaded CI run). On 2026-12-04, 15
	// of seeds 1 to 300 did (19, 57, 80, 114, 157, 198, 211, 221, 223,
	// 238, 261, 274, 275, 288, 296); a look from 55 reached 7 schedules in
	// a CI run under load, and 57 did not find it there (a schedule's
	// decisions are its seed's, its deadlines the machine's), so from
	// 273 the first round holds two chances (274 and 275, both found
	// under -race with the machine busy) and 24 schedules four. Two CI
	// runs at load ~8–25 (ci478, ci481: 3 schedules in 3 minutes, 274 and
	// 275 among them) found it in none: under load a schedule's
	// deadlines fall elsewhere, and a schedule took a minute. So the look
	// is now at the 15 seeds that find it on a quiet machine (each checked
	// alone on 2026-12-06), three of them in each round.
	{inventory.MutationRetireSkip, Options{Profile: "calm", Topology: 1, Restart: -1, Limit: -1, Inline: -1, Loss: 1, Moved: 1}, 0,
		[]int64{274, 275, 288, 296, 261, 238, 223, 221, 211, 198, 157, 114, 80, 57, 19}, 0},
	// A node that leaves a route but stays in the server keeps the
	// route's stock (fixed in 4dd7130): the topology actor's second apply
	// goes to T2 (Shrink), where n3 leaves route c for route d, and the
	// apply moves n4's c/s units only; n3's are stranded there
	// (checkStranded). Every one of seeds 1 to 10 finds it (and of 50600
	// to 50609), none fails without it.
	{inventory.MutationStockLeftOnly, Options{Profile: "calm", Topology: 1, Restart: -1, Limit: -1, Inline: -1, Loss: -1, Moved: -1, Shrink: 1}, 1, nil, 10},
	// Two nodes leaving route c in one apply transfer c/s to the same
	// home under one id, and the second's units are lost (fixed in
	// 4dd7130): the shrink of route c, with the data-loss actor, whose
	// node serves route c (n3) or its new nodes (n1, n2). The look is at
	// seeds whose loss is on such a node, where the stock check used to
	// hold route c only to its own counters (2 or 12 of its 14 units left,
	// 0 violations: seeds 50601, 50611 and 50619 with n3's loss, 50603,
	// 50616 and 50617 too); now to what the loss took off its node's
	// loaded count (checkStock). Without the data loss 6 of seeds 1 to 10
	// find it too.
	{inventory.MutationXferNoSource, Options{Profile: "calm", Topology: 1, Restart: -1, Limit: -1, Inline: -1, Loss: 1, Moved: -1, Shrink: 1}, 0,
		[]int64{50601, 50611, 50619, 50603, 50616, 50617}, 0},
	// Not here: stuck-lost-unfenced (SettleStuckLost without its fence,
	// a re-run after a lost answer settling the part again). Seeds 33,
	// 44, 56, 97, 99 and 119 of the operator profile (operatorOptions)
	// found it on a quiet machine, but each needs the settle's reply lost
	// at the right moment: a clean-clone make test (ci596) ran all six
	// and found it in none. Look for it by hand:
	// make explore SEED=1 N=120 WORLDS=1 PROFILE=lossy TOPOLOGY=-1 RESTART=-1 LIMIT=-1 INLINE=-1 LOSS=-1 MOVED=-1 OPERATOR=1 MUTATIONS=stuck-lost-unfenced
	// Nor stuck-gone-cancel (the expiry cancels a part whose order's
	// record expired while it was set aside): seeds 912404, 912406,
	// 912410, 912418 and 912427 of the calm profile with the set-aside
	// actor found it, but a replay of each found it in 3 of the 5 (the
	// reconciler must reach the part before an operator round does, and
	// the schedule's 80 ms deadlines move with the machine's speed).
	// Look for it by hand:
	// make explore SEED=912400 N=40 WORLDS=1 PROFILE=calm TOPOLOGY=-1 LOSS=-1 OPERATOR=1 ASIDE=1 MUTATIONS=stuck-gone-cancel
}

// mutationBudget bounds the look for each mutation (the n schedules take
// a fraction of it on 2 cores), once mutationMinRun schedules (three
// rounds of its three worlds) were started: a machine busy enough
// started only 4 or 5 in it (ci368, with the explorer's crash profile on
// both cores beside make test), none of which found its mutation.
const (
	mutationBudget = 60 * time.Second
	mutationMinRun = 9
)

// mutationSlots lets two mutation cases look at a time (each on three
// worlds), whatever -parallel says. A world costs about a fifth of a core
// while it only waits (its three routers probe and read marks every 50 ms
// heartbeat), so make test's -parallel 4 had twelve worlds on two cores:
// every schedule stretched, and the worlds' background work with it. The
// seven cases alone under -race, the machine busy elsewhere (load ~7):
// four at a time 117 s of CPU over 123 s, each case 21-91 s; two at a
// time 58 s of CPU over 49 s, each case 5-44 s, so each look ends far
// inside mutationBudget.
var mutationSlots = make(chan struct{}, 2)

func TestExplorerFindsMutations(t *testing.T) {
	if testing.Short() {
		t.Skip("explores up to 64 schedules per mutation")
	}
	for _, c := range mutationCases {
		t.Run(string(c.m), func(t *testing.T) {
			t.Parallel() // most of a schedule is waiting for deadlines
			mutationSlots <- struct{}{}
			defer func() { <-mutationSlots }()
			// 3 minutes: mutationMinRun schedules on a busy machine
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			opts := c.opts
			opts.Mutations = []inventory.Mutation{c.m}
			sum, err := Explore(ctx, Config{Seed: c.seed, Seeds: c.seeds, N: c.n, Budget: mutationBudget, MinRun: mutationMinRun, Worlds: 3, StopAtFirst: true, Options: opts})
			if err != nil {
				t.Fatal(err)
			}
			if len(sum.Failed) == 0 {
				t.Fatalf("the explorer did not find mutation %s in %d schedules (%s; %d interrupted; world errors: %v)",
					c.m, sum.Ran, sum.Took.Round(time.Second), sum.Interrupted, sum.WorldErr)
			}
			f := sum.Failed[0]
			var b strings.Builder
			WriteResult(&b, f, opts, false)
			t.Logf("found after %d schedules (took %s, slowest %s, busy %s):\n%s", sum.Ran, sum.Took, sum.Slowest, sum.Busy, b.String())

			// The same seed without the mutation holds every invariant. Its
			// own deadline: the search may have used most of the other's on a
			// busy machine (ci471: 2m45s of 3m, then this schedule, which had
			// taken 1m19s there, ran out of it).
			rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer rcancel()
			w, err := NewWorld()
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			res, err := w.RunSchedule(rctx, f.Seed, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Violations) > 0 {
				b.Reset()
				WriteResult(&b, res, c.opts, true)
				t.Errorf("seed %d fails without the mutation too:\n%s", f.Seed, b.String())
			}
		})
	}
}
