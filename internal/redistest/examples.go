package redistest

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/shardis/shardis/internal/redisproc"
)

// ExamplesEnv names the variable ExamplesMain sets to the examples' node
// addresses, comma-separated: the runnable Examples read it, so an
// embedder reading one sees plain addresses, not these helpers.
const ExamplesEnv = "EXAMPLE_REDIS_ADDRS"

// ExamplesMain is a package's TestMain for packages with runnable
// Examples: it starts two throwaway redis-server nodes, names them in
// ExamplesEnv, runs m and exits with its code. A run that runs none of
// the named examples (fuzzing, or -run selecting none of them) starts
// nothing.
func ExamplesMain(m *testing.M, examples ...string) {
	flag.Parse()
	if !runsExamples(examples) {
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
	if err := os.Setenv(ExamplesEnv, strings.Join(addrs, ",")); err != nil {
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
func runsExamples(names []string) bool {
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
