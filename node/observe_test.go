package node_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// Observe is called only for commands that reached the network: a command
// on the closed client (redis.ErrClosed) is not observed. Found by a
// review: record called Observe for every admitted command, so latency
// metrics counted commands that were never sent.
func TestObserveSkipsCommandsOnTheClosedClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	var observed atomic.Int32
	n := newNode(t, node.Options{Name: "n1", Addr: s.Addr(),
		Observe: func(time.Duration, bool) { observed.Add(1) }}, nil)
	if err := n.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	n.SetUp()
	if err := n.Client().Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET of a missing key: %v, want redis.Nil", err)
	}
	if observed.Load() == 0 {
		t.Fatal("Observe not called for a command the node answered")
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	before := observed.Load()
	if err := n.Client().Get(ctx, "k").Err(); !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("GET after Close: %v, want redis.ErrClosed", err)
	}
	if got := observed.Load() - before; got != 0 {
		t.Errorf("Observe called %d times for a command on the closed client (never sent)", got)
	}
}

// A command that got no free connection in time (redis.ErrPoolTimeout)
// never reached the network and is not observed. Found by a review, as
// for the closed client above.
func TestObserveSkipsCommandsThatTimedOutInThePool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	var observed atomic.Int32
	n := newNode(t, node.Options{Name: "n1", Addr: s.Addr(), PoolSize: 1, CommandTimeout: 200 * time.Millisecond,
		Observe: func(time.Duration, bool) { observed.Add(1) }}, nil)
	if err := n.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	n.SetUp()
	blocked := make(chan error, 1)
	go func() { blocked <- n.Client().BLPop(ctx, time.Second, "empty").Err() }() // holds the one connection
	time.Sleep(100 * time.Millisecond)
	before := observed.Load()
	if err := n.Client().Get(ctx, "k").Err(); !errors.Is(err, redis.ErrPoolTimeout) {
		t.Fatalf("GET with the one connection taken: %v, want redis.ErrPoolTimeout", err)
	}
	if got := observed.Load() - before; got != 0 {
		t.Errorf("Observe called %d times for a command that got no connection (never sent)", got)
	}
	if err := <-blocked; !errors.Is(err, redis.Nil) {
		t.Fatalf("BLPOP of an empty list: %v, want redis.Nil", err)
	}
}
