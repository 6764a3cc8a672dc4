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

// A half-open trial whose caller gave up (its context ended before the
// reply) is excluded by the breaker, which then admits the next trial; the
// node must be Usable again so the router sends it. Found by a review:
// Usable read Counts().Requests == 0, which an excluded trial leaves at 1,
// so a healthy node stayed unusable (no trial was ever sent) until it
// happened to go DOWN.
func TestUsableAfterExcludedHalfOpenTrial(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, n := openedOnPause(t, ctx, 300*time.Millisecond)
	time.Sleep(250 * time.Millisecond) // past the open timeout
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	_ = n.Client().Get(short, "k").Err() // the trial; its caller gives up: excluded
	cancelShort()
	s.Resume()
	if err := n.Probe(ctx); err != nil {
		t.Fatalf("probe of the resumed node: %v", err)
	}
	n.SetUp() // as the scheduler does after the probe: no change, the breaker is kept
	if !n.Usable() {
		t.Fatalf("Usable() = false (breaker %s) after an excluded half-open trial on a healthy node", n.BreakerState())
	}
	if err := n.Client().Get(ctx, "k").Err(); err != nil {
		t.Fatalf("the next trial: %v", err)
	}
	if got := n.BreakerState(); got != "closed" {
		t.Errorf("breaker %s after a successful trial, want closed", got)
	}
}

// openedOnPause starts a server and an UP node over it whose breaker
// opens at one failure for 200ms, writes key k, pauses the server and
// sends a GET, which times out after cmdTimeout: a node failure, so the
// breaker is open. The server stays paused.
func openedOnPause(t *testing.T, ctx context.Context, cmdTimeout time.Duration) (*redistest.Server, *node.Node) {
	t.Helper()
	s := redistest.Start(t, redistest.Options{})
	n := newNode(t, node.Options{Name: "n1", Addr: s.Addr(), BreakerFailures: 1,
		BreakerOpenTimeout: 200 * time.Millisecond, CommandTimeout: cmdTimeout}, nil)
	if err := n.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	n.SetUp()
	if err := n.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Pause()
	if err := n.Client().Get(ctx, "k").Err(); !node.IsFailure(ctx, err) {
		t.Fatalf("GET on a paused node: %v, want a node failure", err)
	}
	return s, n
}
