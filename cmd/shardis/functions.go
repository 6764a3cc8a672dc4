package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
)

const functionsUsage = `usage: shardis functions show --config FILE
       shardis functions prune --config FILE [--dry-run]

The inventory's scripts run as Redis function libraries, one per script,
named shardis_<script>_<hash>; each release loads its own and leaves the
others' in place (an instance of the release before may still be calling
them). show lists, per node, this release's libraries and those of other
releases; prune deletes the others' (FUNCTION DELETE), to run once every
instance runs this release. An instance of another release that still
runs loses nothing: its next calls load its libraries again. Libraries
that are not shardis's are never touched. It talks to the nodes directly,
not to a service.
`

// cmdFunctions is the functions command: show or prune.
func cmdFunctions(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "show" && args[0] != "prune") {
		fmt.Fprint(stderr, functionsUsage)
		if len(args) > 0 && isHelp(args[0]) {
			return flag.ErrHelp
		}
		return fmt.Errorf("%w: functions needs the subcommand show or prune", errUsage)
	}
	sub := args[0]
	fs := flag.NewFlagSet("functions "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration naming the nodes (required)")
	dry := false
	if sub == "prune" {
		fs.BoolVar(&dry, "dry-run", false, "list what prune would delete, delete nothing")
	}
	fs.Usage = func() { fmt.Fprint(stderr, functionsUsage); fs.PrintDefaults() }
	rest, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: functions %s takes no arguments, got %q", errUsage, sub, rest)
	}
	if *cfgPath == "" {
		fs.Usage()
		return fmt.Errorf("%w: functions %s needs --config", errUsage, sub)
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nodes, err := inventory.PruneFunctions(ctx, cfg, sub == "show" || dry)
	if err != nil {
		return err
	}
	failed := writeFunctions(stdout, nodes, sub, dry)
	if failed > 0 {
		return fmt.Errorf("functions %s: %d of %d nodes not done", sub, failed, len(nodes))
	}
	return nil
}

// writeFunctions prints what functions show or prune (a dry run when dry)
// found per node, and returns how many nodes failed.
func writeFunctions(stdout io.Writer, nodes []inventory.NodeLibraries, sub string, dry bool) int {
	fmt.Fprintf(stdout, "this release: %d libraries\n", len(inventory.FunctionLibraries()))
	verb := "of other releases"
	switch {
	case sub == "prune" && dry:
		verb = "of other releases, would delete"
	case sub == "prune":
		verb = "of other releases, deleted"
	}
	failed := 0
	for _, nl := range nodes {
		if nl.Err != nil {
			failed++
			fmt.Fprintf(stdout, "%-12s %v\n", nl.Node, nl.Err)
			continue
		}
		fmt.Fprintf(stdout, "%-12s %d of this release's loaded; %d %s", nl.Node, len(nl.Current), len(nl.Other), verb)
		if len(nl.Other) > 0 {
			fmt.Fprintf(stdout, ": %s", strings.Join(nl.Other, " "))
		}
		fmt.Fprintln(stdout)
	}
	return failed
}
