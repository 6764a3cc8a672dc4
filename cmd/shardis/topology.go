package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/topology"
)

const topologyUsage = `usage: shardis topology show --config FILE
       shardis topology apply --config NEW [--from OLD] [--wait D] [--dry-run] [--json]

show prints each node's topology epoch and phase, and whether FILE's
topology is the one applied; when a node cannot be read it says so and,
after the rest, exits with status 1.

Moves the inventory nodes to the topology (routes, nodes, weights of the
inventory server) of NEW, as SECURITY.md and README describe: every node of
the old and new topology must be up; --from OLD gives the addresses of nodes
that leave (drain them first: their pending parts are settled by the apply
after their deadlines, and their stock moves once nothing is reserved; a
part it cannot settle is set aside and named, and waits for an operator's
shardis parts settle through a service still running OLD).
Running it again resumes an interrupted apply. An apply that stops with the
epoch still migrating (pending parts past --wait) has not finished: it exits
with status 1, and running it again later finishes it. It talks to the nodes
directly, not to a service.
`

func cmdTopology(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "show" {
		return cmdTopologyShow(args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "apply" {
		fmt.Fprint(stderr, topologyUsage)
		if len(args) > 0 && isHelp(args[0]) {
			return flag.ErrHelp
		}
		return fmt.Errorf("%w: topology needs the subcommand show or apply", errUsage)
	}
	return cmdTopologyApply(args[1:], stdout, stderr)
}

// cmdTopologyApply is topology apply: it applies --config's topology to
// the nodes and prints the report.
func cmdTopologyApply(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("topology apply", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration with the new topology (required)")
	fromPath := fs.String("from", "", "configuration now applied (for the addresses of nodes that leave)")
	wait := fs.Duration("wait", 0, "how long to wait for pending parts that hold counters (default 1m; then it stops, still migrating, and a rerun finishes)")
	dry := fs.Bool("dry-run", false, "check and report without writing")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	fs.Usage = func() { fmt.Fprint(stderr, topologyUsage); fs.PrintDefaults() }
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: topology apply takes no arguments, got %q", errUsage, rest)
	}
	if *cfgPath == "" {
		fs.Usage()
		return fmt.Errorf("%w: topology apply needs --config", errUsage)
	}
	if *wait < 0 {
		return fmt.Errorf("%w: --wait %v: want a duration that is not negative (0: the default, 1m)", errUsage, *wait)
	}
	to, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	opts := inventory.ApplyOptions{To: to, Wait: *wait, DryRun: *dry,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	if *fromPath != "" {
		if opts.From, err = config.Load(*fromPath); err != nil {
			return err
		}
	}
	ctx, stop := untilSignal()
	defer stop()
	start := time.Now()
	rep, err := inventory.ApplyTopology(ctx, opts)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		writeApplyReport(stdout, rep, *dry, time.Since(start))
	}
	return unfinished(rep, *dry)
}

// unfinished fails an apply that stopped with the epoch still migrating
// (counters held by pending parts past --wait): the topology is not
// applied yet, so scripts must not take it as done. A dry run only
// reports.
func unfinished(rep topology.Report, dry bool) error {
	if dry || rep.Phase != topology.PhaseMigrating {
		return nil
	}
	if len(rep.SetAside) > 0 {
		return fmt.Errorf("topology apply: epoch %d not finished, still migrating (%d counters wait for pending parts; %d parts set aside on leaving nodes "+
			"wait for an operator's settle, listed above): run it again once they are settled", rep.ToEpoch, rep.Waiting, len(rep.SetAside))
	}
	return fmt.Errorf("topology apply: epoch %d not finished, still migrating (%d counters wait for pending parts): run it again later to finish",
		rep.ToEpoch, rep.Waiting)
}

// writeApplyReport prints an apply's report for people: what moved, and
// whether a rerun is needed to finish.
func writeApplyReport(stdout io.Writer, rep topology.Report, dry bool, took time.Duration) {
	if len(rep.Repaired) > 0 {
		verb := "wrote"
		if dry {
			verb = "dry run: would write"
		}
		fmt.Fprintf(stdout, "%s the lost topology record of %s again at epoch %d (its stamp names it; every other record at it is stable)\n",
			verb, list(rep.Repaired), rep.ToEpoch)
	}
	switch {
	case rep.AlreadyApplied:
		fmt.Fprintf(stdout, "topology already applied at epoch %d: %s\n", rep.ToEpoch, rep.To)
		return
	case len(rep.Forward) > 0:
		verb := "brought"
		if dry {
			verb = "dry run: would bring"
		}
		fmt.Fprintf(stdout, "%s forward to epoch %d: %s (behind it, with an older copy of their data; no other node changed)\n",
			verb, rep.ToEpoch, list(rep.Forward))
		writeRetired(stdout, rep)
		return
	case dry:
		fmt.Fprintf(stdout, "dry run: epoch %d → %d\n", rep.FromEpoch, rep.ToEpoch)
	default:
		fmt.Fprintf(stdout, "applied: epoch %d → %d (%s) in %v\n", rep.FromEpoch, rep.ToEpoch, rep.Phase, took.Round(time.Millisecond))
	}
	if rep.Phase == topology.PhaseMigrating && !dry {
		fmt.Fprintf(stdout, "still migrating: %d counters wait for pending parts (orders not yet confirmed or cancelled); run this command again later to finish\n", rep.Waiting)
		writeSetAside(stdout, rep.SetAside)
	}
	fmt.Fprintf(stdout, "from: %s\nto:   %s\n", rep.From, rep.To)
	fmt.Fprintf(stdout, "joined: %s\nleft:   %s\n", list(rep.Joined), list(rep.Left))
	if rep.LeftPending > 0 {
		fmt.Fprintf(stdout, "leaving nodes held %d pending parts: the apply settles them after their deadlines\n", rep.LeftPending)
	}
	if !dry {
		fmt.Fprintf(stdout, "limits copied %d, orders moved %d, staged orders decided %d, quota counters moved %d, stock moved %d, parts settled %d\n",
			rep.LimitsCopied, rep.OrdersMoved, rep.StagedDecided, rep.QuotasMoved, rep.StockMoved, rep.PartsSettled)
	}
	writeRetired(stdout, rep)
}

// writeSetAside prints the parts set aside on leaving nodes
// (topology.Moved.SetAside) and what the operator runs: they wait for
// an operator, not for time, and the node leaves only once they settle.
func writeSetAside(stdout io.Writer, parts []topology.SetAsidePart) {
	if len(parts) == 0 {
		return
	}
	for _, p := range parts {
		order := p.OrderID
		if order == "" {
			order = "unknown: its record is gone"
		}
		fmt.Fprintf(stdout, "part set aside on leaving node %s: %s (order %s): %s\n", p.Node, p.PartID, order, p.Reason)
	}
	fmt.Fprintf(stdout, "the %d parts set aside hold units reserved on their leaving node: its stock cannot move and it cannot leave until each is settled; "+
		"decide each by the system of record, through a service whose configuration names the node (the --from configuration): "+
		"`shardis parts settle --route R --sku S --qty N NODE PART_ID confirm|cancel` for a part whose own record is gone (or a tombstone), "+
		"`shardis parts settle NODE PART_ID confirm|cancel` for one whose order's record is gone, or repair its data and `shardis parts retry NODE PART_ID`; "+
		"then run this command again\n", len(parts))
}

// writeRetired prints what the apply retired and put back on nodes that
// came back with older data (topology.Driver.Retire), when it did.
func writeRetired(stdout io.Writer, rep topology.Report) {
	if rep.Retired > 0 {
		fmt.Fprintf(stdout, "stale order records retired %d: live away from their home, come back with a node's older data (logged one by one)\n", rep.Retired)
	}
	if rep.Reinstalled > 0 {
		fmt.Fprintf(stdout, "order records put back %d: moved onto a node by the apply, lost when it went back to older data; put back from their moved copy (logged one by one)\n", rep.Reinstalled)
	}
	if rep.TakenBack > 0 {
		fmt.Fprintf(stdout, "counters taken back %d: transferred off a node by the apply, come back with its older data; taken off it again (logged one by one)\n", rep.TakenBack)
	}
	for _, l := range rep.LeftBehind {
		fmt.Fprintf(stdout, "counter left behind: %s on %s (%s): came back with the node's older data after its transfer, counted on its destination too; no instance reads it there. Delete it once its reserved units, if any, are settled; an apply that would serve it again refuses until then\n", l.Key, l.Node, l.Why)
	}
}

func list(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, " ")
}

func cmdTopologyShow(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("topology show", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration (required)")
	fs.Usage = func() { fmt.Fprint(stderr, topologyUsage); fs.PrintDefaults() }
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: topology show takes no arguments, got %q", errUsage, rest)
	}
	if *cfgPath == "" {
		fs.Usage()
		return fmt.Errorf("%w: topology show needs --config", errUsage)
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs, errs, err := inventory.ReadTopology(ctx, cfg)
	if err != nil {
		return err
	}
	writeTopologyShow(stdout, topology.Of(cfg), recs, errs)
	return unreadTopology(errs)
}

// unreadTopology fails a topology show that could not read a node, naming
// them: the report lacks their records, and a script must not take it as
// complete.
func unreadTopology(errs map[string]error) error {
	if len(errs) == 0 {
		return nil
	}
	bad := make([]string, 0, len(errs))
	for n := range errs {
		bad = append(bad, n)
	}
	slices.Sort(bad)
	return fmt.Errorf("topology show: %s could not be read", strings.Join(bad, ", "))
}

// writeTopologyShow prints topology show's report: the configuration's
// topology, each node's record (or why it could not be read), and what
// the apply takes as current and has left to do.
func writeTopologyShow(stdout io.Writer, mine topology.Topology, recs []topology.Record, errs map[string]error) {
	fmt.Fprintf(stdout, "configuration: %s (fingerprint %s)\n", mine, mine.Fingerprint())
	var read []topology.Record
	for _, r := range recs {
		if errs[r.Node] == nil {
			read = append(read, r)
		}
		switch {
		case errs[r.Node] != nil:
			fmt.Fprintf(stdout, "%-12s unreadable: %v\n", r.Node, errs[r.Node])
		case r.Epoch == 0:
			fmt.Fprintf(stdout, "%-12s no topology record\n", r.Node)
		case r.Fenced:
			fmt.Fprintf(stdout, "%-12s epoch %d %-9s %s (accepted behind its peers: fenced)\n", r.Node, r.Epoch, r.Phase, r.Current)
		default:
			fmt.Fprintf(stdout, "%-12s epoch %d %-9s %s\n", r.Node, r.Epoch, r.Phase, r.Current)
		}
	}
	newest, err := topology.Current(read) // what an apply takes as current
	switch {
	case err != nil:
		fmt.Fprintf(stdout, "the apply cannot tell the current topology: %v\n", err)
		return
	case newest.Epoch == 0:
		fmt.Fprintln(stdout, "no node has a topology record: the first instance started initialises them")
		return
	case newest.Current.Fingerprint() == mine.Fingerprint():
		fmt.Fprintf(stdout, "this configuration is the applied topology (epoch %d, %s)\n", newest.Epoch, newest.Phase)
	default:
		fmt.Fprintf(stdout, "this configuration is NOT the applied topology (epoch %d: %s): instances with it refuse to act\n", newest.Epoch, newest.Current)
	}
	writeUnfinished(stdout, recs, errs, newest)
}

// writeUnfinished says what `topology apply` has left to do when the
// nodes that read are not all at newest's token and stable: an apply
// stopped midway, or a node whose data came back from a copy older than
// the last apply and was accepted (topology/doc.go, "A node that went
// back"). Instances at the newest token refuse a node behind it, so the
// orders homed there wait until the apply of newest's topology runs again.
func writeUnfinished(w io.Writer, recs []topology.Record, errs map[string]error, newest topology.Record) {
	var behind []string
	members := newest.Current.Nodes()
	for _, r := range recs {
		switch {
		case errs[r.Node] != nil || !slices.Contains(members, r.Node):
		case r.Fenced:
			behind = append(behind, fmt.Sprintf("%s (epoch %d, fenced)", r.Node, r.Epoch))
		case r.Epoch > 0 && r.Epoch < newest.Epoch:
			behind = append(behind, fmt.Sprintf("%s (epoch %d)", r.Node, r.Epoch))
		}
	}
	switch {
	case len(behind) > 0:
		fmt.Fprintf(w, "behind epoch %d: %s: instances at epoch %d refuse them; run `shardis topology apply --config` with epoch %d's configuration (%s) to bring them forward\n",
			newest.Epoch, strings.Join(behind, ", "), newest.Epoch, newest.Epoch, newest.Current)
	case newest.Phase != topology.PhaseStable:
		fmt.Fprintf(w, "the apply of epoch %d has not finished (phase %s): run `shardis topology apply --config` with epoch %d's configuration (%s) again to finish it\n",
			newest.Epoch, newest.Phase, newest.Epoch, newest.Current)
	}
}
