package node_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// A command admitted before SetDown → SetUp that fails afterwards reports
// to the breaker it was admitted under, which is retired: the node's new
// breaker stays closed and the node usable (issue 9, item 6). Before the
// fix the late failure opened the new breaker for the whole open timeout.
func TestRetiredBreakerCannotOpenTheNewOne(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{})
	n := newNode(t, node.Options{Name: "n1", Addr: s.Addr(), CommandTimeout: 300 * time.Millisecond,
		BreakerFailures: 1, BreakerOpenTimeout: time.Minute}, nil)
	ctx := context.Background()
	if err := n.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	n.SetUp()
	if err := n.Client().Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.Pause()
	defer s.Resume()
	late := make(chan error, 1)
	go func() { late <- n.Client().Get(ctx, "k").Err() }() // admitted now, fails at the command timeout
	time.Sleep(50 * time.Millisecond)
	n.SetDown(errors.New("probe failed"))
	n.SetUp() // a probe passed: fresh breaker
	if err := <-late; !node.IsFailure(ctx, err) {
		t.Fatalf("GET on a frozen node: %v, want a node failure", err)
	}
	if got := n.BreakerState(); got != "closed" || !n.Usable() {
		t.Fatalf("after a failure of a command admitted under the retired breaker: breaker %s, usable %v; want closed, usable",
			got, n.Usable())
	}
}

// Commands given up by their callers and successes racing on the breaker
// and the fast path (under -race): give-ups are never counted against the
// node, so the breaker stays closed and the node usable.
func TestBreakerFastPathRace(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{})
	n := newNode(t, node.Options{Name: "n1", Addr: s.Addr(), BreakerFailures: 1000, BreakerOpenTimeout: time.Second}, nil)
	ctx := context.Background()
	if err := n.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	n.SetUp()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if g%2 == 0 {
					short, cancel := context.WithTimeout(ctx, time.Nanosecond) // the caller gives up: excluded
					_ = n.Client().Get(short, "k").Err()
					cancel()
				} else {
					_ = n.Client().Get(ctx, "k").Err()
				}
			}
		}(g)
	}
	wg.Wait()
	if got := n.BreakerState(); got != "closed" || !n.Usable() {
		t.Fatalf("after successes and caller give-ups: breaker %s usable %v", got, n.Usable())
	}
}
