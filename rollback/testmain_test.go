package rollback_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/shardis/shardis/internal/redisproc"
)

// TestMain starts the two throwaway redis-server nodes the examples use
// and names them in $EXAMPLE_REDIS_ADDRS (see exampleNodes): an embedder
// reading an example sees plain addresses, not this package's helpers.
func TestMain(m *testing.M) {
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
