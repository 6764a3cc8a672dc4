package explore

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/shardis/shardis/inventory"
)

// ReplayCommand is the one-line command that runs seed again alone.
func ReplayCommand(seed int64, opts Options) string {
	cmd := fmt.Sprintf("make explore SEED=%d N=1", seed)
	if len(opts.Mutations) > 0 {
		ms := make([]string, len(opts.Mutations))
		for i, m := range opts.Mutations {
			ms[i] = string(m)
		}
		cmd += " MUTATIONS=" + strings.Join(ms, ",")
	}
	if opts.Profile != "" {
		cmd += " PROFILE=" + opts.Profile
	}
	if opts.Topology != 0 {
		cmd += fmt.Sprintf(" TOPOLOGY=%g", opts.Topology)
	}
	if opts.Restart != 0 {
		cmd += fmt.Sprintf(" RESTART=%g", opts.Restart)
	}
	if opts.Limit != 0 {
		cmd += fmt.Sprintf(" LIMIT=%g", opts.Limit)
	}
	if opts.Inline != 0 {
		cmd += fmt.Sprintf(" INLINE=%g", opts.Inline)
	}
	if opts.Loss != 0 {
		cmd += fmt.Sprintf(" LOSS=%g", opts.Loss)
	}
	if opts.Moved != 0 {
		cmd += fmt.Sprintf(" MOVED=%g", opts.Moved)
	}
	if opts.Twin > 0 {
		cmd += fmt.Sprintf(" TWIN=%g", opts.Twin)
	}
	if opts.Loss2 > 0 {
		cmd += fmt.Sprintf(" LOSS2=%g", opts.Loss2)
	}
	if opts.Relimit > 0 {
		cmd += fmt.Sprintf(" RELIMIT=%g", opts.Relimit)
	}
	if opts.Shrink > 0 {
		cmd += fmt.Sprintf(" SHRINK=%g", opts.Shrink)
	}
	if opts.Rejoin > 0 {
		cmd += fmt.Sprintf(" REJOIN=%g", opts.Rejoin)
	}
	if opts.Abandon > 0 {
		cmd += fmt.Sprintf(" ABANDON=%g", opts.Abandon)
	}
	if opts.OOM > 0 {
		cmd += fmt.Sprintf(" OOM=%g", opts.OOM)
	}
	if opts.Operator > 0 {
		cmd += fmt.Sprintf(" OPERATOR=%g", opts.Operator)
	}
	if opts.Aside > 0 {
		cmd += fmt.Sprintf(" ASIDE=%g", opts.Aside)
	}
	if opts.Clock > 0 {
		cmd += fmt.Sprintf(" CLOCK=%g", opts.Clock)
		if opts.ClockStep > 0 && opts.ClockStep != defaultClockStep {
			cmd += " CLOCKSTEP=" + opts.ClockStep.String()
		}
	}
	return cmd
}

// ParseMutations reads a comma-separated list of mutation names.
func ParseMutations(s string) ([]inventory.Mutation, error) {
	if s == "" {
		return nil, nil
	}
	known := []inventory.Mutation{inventory.MutationStageTakeover, inventory.MutationApplyLeavesStaging,
		inventory.MutationXferNegativeZero, inventory.MutationLimitWithdraw, inventory.MutationFenceSkip, inventory.MutationInlineUnwritten, inventory.MutationInstallInline,
		inventory.MutationRetireSkip, inventory.MutationReinstallSkip, inventory.MutationLimitUnfenced,
		inventory.MutationStockLeftOnly, inventory.MutationXferNoSource, inventory.MutationStuckLostUnfenced, inventory.MutationStuckGoneCancel}
	var out []inventory.Mutation
	for _, f := range strings.Split(s, ",") {
		m := inventory.Mutation(strings.TrimSpace(f))
		if !slices.Contains(known, m) {
			return nil, fmt.Errorf("explore: unknown mutation %q (want one of %v)", m, known)
		}
		out = append(out, m)
	}
	return out, nil
}

func sortResults(rs []Result) {
	sort.Slice(rs, func(i, j int) bool { return rs[i].Seed < rs[j].Seed })
}

// WriteResult writes a failing schedule: its violations, the replay
// command, and (verbose) what the actors were told and the trace.
func WriteResult(out io.Writer, r Result, opts Options, verbose bool) {
	fmt.Fprintf(out, "seed %d: %d violation(s) (%s, decisions digest %s)\n", r.Seed, len(r.Violations), r.Took.Round(time.Millisecond), r.Digest)
	for _, v := range r.Violations {
		fmt.Fprintf(out, "  %s\n", v)
	}
	fmt.Fprintf(out, "  replay: %s\n", ReplayCommand(r.Seed, opts))
	if !verbose {
		return
	}
	fmt.Fprintln(out, "  actors were told:")
	for _, l := range r.Log {
		fmt.Fprintf(out, "    %s\n", l)
	}
	fmt.Fprintln(out, "  schedule:")
	for _, l := range r.Trace {
		fmt.Fprintf(out, "    %s\n", l)
	}
}

// WriteSummary writes the run's totals.
func WriteSummary(out io.Writer, s Summary) {
	per := time.Duration(0)
	if s.Ran > 0 {
		per = s.Busy / time.Duration(s.Ran)
	}
	fmt.Fprintf(out, "explore: %d schedules in %s, %d failing; %s per schedule on average (%s of it waiting for deadlines), slowest %s\n",
		s.Ran, s.Took.Round(time.Millisecond), len(s.Failed), per.Round(time.Millisecond),
		(s.Waited / time.Duration(max(s.Ran, 1))).Round(time.Millisecond), s.Slowest.Round(time.Millisecond))
	if s.Losses > 0 {
		fmt.Fprintf(out, "explore: %d schedule(s) had a node lose acknowledged writes and accepted; %d violation(s) about the orders and counters exposed were excused\n", s.Losses, s.Excused)
	}
	if s.Applies > 0 {
		fmt.Fprintf(out, "explore: %d topology apply(s) ran; they retired %d stale order record(s), put back %d and took back %d counter(s) (topology.Driver.Retire); %d copies marked moved were left without a TTL\n",
			s.Applies, s.Retired, s.Reinstalled, s.TakenBack, s.Frozen)
	}
	if s.Rejoins > 0 || s.Stale > 0 {
		fmt.Fprintf(out, "explore: %d rejoin apply(s) ran, %d stable, %d refused for stale counters, %d refused otherwise; %d apply(s) in all refused for stale counters, naming %d counter(s); the heal deleted %d of them and applied again\n",
			s.Rejoins, s.RejoinStable, s.RejoinRefused, s.RejoinInvalid, s.Stale, s.StaleFound, s.StaleCleared)
	}
	if s.Operators > 0 {
		fmt.Fprintf(out, "explore: %d operator actor(s) ran; their listings showed %d stuck part(s) while the actors ran and %d at the heal, and %d of the operator's settles answered or may have landed; %d pending part record(s) deleted\n",
			s.Operators, s.StuckListed, s.HealListed, s.Operated, s.Evicted)
	}
	if len(s.Verdicts) > 0 || s.Expired > 0 {
		var vs []string
		for _, k := range slices.Sorted(maps.Keys(s.Verdicts)) {
			vs = append(vs, fmt.Sprintf("%s %d", k, s.Verdicts[k]))
		}
		fmt.Fprintf(out, "explore: the set-aside actor expired %d order record(s), %d of them confirmed; the operator's settles met: %s\n", s.Expired, s.ExpiredPaid, strings.Join(vs, ", "))
	}
	for _, err := range s.WorldErr {
		fmt.Fprintf(out, "explore: world error: %v\n", err)
	}
	if s.Interrupted > 0 {
		fmt.Fprintf(out, "explore: interrupted: %d schedule(s) cut short, not counted\n", s.Interrupted)
	}
}
