package rollback_test

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/shardis/shardis/internal/redisproc"
)

// TestMain starts the two throwaway redis-server nodes the examples use
// and names them in $EXAMPLE_REDIS_ADDRS (see exampleNodes): an embedder
// reading an example sees plain addresses, not this package's helpers.
// Runs that run no example (fuzzing, -run selecting none) start nothing.
func TestMain(m *testing.M) {
	flag.Parse()
	if !runsExamples("Example") {
		os.Exit(m.Run())
	}
	var procs []*redisproc.Server
	stop := func() {
		for _, p := range procs {
			_ = p.Close()
		}
	}
	var addrs []string
	for range 2 {
		p, err := redisproc.Start(redisproc.Options{KillWithParent: true})
		if err != nil {
			fmt.Fprintln(os.Stderr, "starting the examples' redis-server:", err)
			stop()
			os.Exit(1)
		}
		procs = append(procs, p)
		addrs = append(addrs, p.Addr())
	}
	if err := os.Setenv("EXAMPLE_REDIS_ADDRS", strings.Join(addrs, ",")); err != nil {
		stop()
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

// runsExamples reports whether this run may run one of the named
// examples: not while fuzzing (every fuzz worker runs TestMain too), and
// with -run only when its pattern matches one.
func runsExamples(names ...string) bool {
	for _, f := range []string{"test.fuzz", "test.fuzzworker"} {
		if v := flag.Lookup(f); v != nil && v.Value.String() != "" && v.Value.String() != "false" {
			return false
		}
	}
	run := flag.Lookup("test.run")
	if run == nil || run.Value.String() == "" {
		return true
	}
	re, err := regexp.Compile(strings.Split(run.Value.String(), "/")[0])
	if err != nil {
		return true
	}
	for _, n := range names {
		if re.MatchString(n) {
			return true
		}
	}
	return false
}
