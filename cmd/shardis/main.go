// Command shardis is the shardis command-line tool: it routes keys from a
// configuration (`shardis route`) and prints its version. Later
// subcommands serve and operate the inventory service.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
)

// version is set at link time (-ldflags "-X main.version=…"); otherwise it
// comes from the module build info.
var version = ""

const usage = `usage: shardis <command> [flags]

commands:
  serve     run the inventory and admin services (--config FILE)
  route     print the node each key routes to (from the config alone)
  version   print the version
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
	var err error
	switch args[0] {
	case "route":
		err = cmdRoute(args[1:], stdin, stdout, stderr)
	case "serve":
		err = cmdServe(args[1:], stderr)
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

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
