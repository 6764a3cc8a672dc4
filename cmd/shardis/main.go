// Command shardis is the shardis command-line tool: it routes keys from a
// configuration (`shardis route`) and prints its version. Later
// subcommands serve and operate the inventory service.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/shardis/shardis/node"
)

const usage = `usage: shardis <command> [flags]

commands:
  serve     run the inventory and admin services (--config FILE)
  sync      land the redo log in PostgreSQL (--config FILE [--migrate]);
            sync migrate creates the schema, sync status prints lag per node and queue
  route     print the node each key routes to, or with --orders the node holding
            each order's record (from the config alone)
  topology  topology show --config F: each node's topology epoch and phase;
            topology apply --config NEW [--from OLD]: move the inventory nodes to a
            new membership (add/remove nodes) safely, with orders in flight
  functions functions show|prune --config F [--dry-run]: list the inventory's
            Redis function libraries per node; prune deletes other releases'
  version   print the version

client commands (talk to a running service; --addr, --token, --timeout, --json):
  status    list nodes (state, breaker, persistence, routes), readiness, topology
            epoch, redo backlog, deferred and stuck parts
  stock     load or get a SKU's stock (stock load|get --route R --sku S ...)
  order-id  mint an order id placed on a node that is up ([ROUTE...])
  reserve   reserve an order's items (--order O ROUTE:SKU:QTY...)
  confirm   confirm a reserved order
  cancel    cancel an order
  drain     disable a route on a node (NODE SERVER ROUTE); refused for the last
            enabled node of a route unless --force
  undrain   re-enable a route on a node (NODE SERVER ROUTE)
  redo-log  read a node's redo-log queue (--node N --queue Q [--follow]);
            redo-log ack --node N --queue Q [--incarnation INC] [--part ID] OFFSET records a consumer's progress
  parts     parts stuck lists parts the reconciler set aside (cannot be settled);
            parts retry NODE PART_ID | --all | --sku SKU retries them after a repair
            parts settle NODE PART_ID confirm|cancel decides one whose order's record is gone
            (--route R --sku S --qty N: one whose own record is gone, by what it held;
            --user U too for a quota part, the user whose count it holds)
  node      node accept NODE: accept the data of an inventory node refused for
            coming back empty or with older data

Run "shardis COMMAND -h" for a command's flags; flags may come before or after
the arguments ("--" ends them).
`

// errUsage marks a command-line mistake: exit status 2.
var errUsage = errors.New("usage")

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes one command and returns the process exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	// go-redis's own log lines (pool.go: failed to dial, while a node is
	// down) go through slog at debug level, dropped at info: shardis
	// reports node failures itself. serve and sync route them again to
	// their --log-level logger.
	node.RouteRedisLogs(slog.New(slog.NewTextHandler(stderr, nil)))
	var err error
	switch args[0] {
	case "route":
		err = cmdRoute(args[1:], stdin, stdout, stderr)
	case "serve":
		err = cmdServe(args[1:], stderr)
	case "sync":
		err = cmdSync(args[1:], stdout, stderr)
	case "topology":
		err = cmdTopology(args[1:], stdout, stderr)
	case "functions":
		err = cmdFunctions(args[1:], stdout, stderr)
	case "status", "stock", "reserve", "confirm", "cancel", "drain", "undrain", "redo-log", "parts", "node", "order-id":
		err = cmdClient(args[0], args[1:], stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "shardis", versionString())
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "shardis: unknown command %q\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "shardis:", err)
		return 2
	default:
		fmt.Fprintln(stderr, "shardis:", err)
		return 1
	}
}

// parseLevel reads a --log-level value: debug, info, warn or error, in any
// case; any other (slog's offsets such as info+2 too) wraps errUsage,
// naming it.
func parseLevel(level string) (slog.Level, error) {
	for _, lvl := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
		if strings.EqualFold(level, lvl.String()) {
			return lvl, nil
		}
	}
	return 0, fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", errUsage, level)
}

// newLogger returns the logger of a long-running command (serve, sync):
// text or JSON lines on w at lvl, each with component=NAME, so the lines
// of processes that share a terminal (`make run` runs serve and sync side
// by side, each watching the same nodes and logging their "node up" and
// "node down") tell which process said them.
func newLogger(w io.Writer, lvl slog.Level, jsonLines bool, component string) *slog.Logger {
	hopts := &slog.HandlerOptions{Level: lvl}
	var handler slog.Handler = slog.NewTextHandler(w, hopts)
	if jsonLines {
		handler = slog.NewJSONHandler(w, hopts)
	}
	return slog.New(handler).With("component", component)
}
