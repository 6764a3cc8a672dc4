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

// Commands through a client this process closed (after Close, or a client
// a renewal retired that a caller still held) say nothing about the node:
// they fail with redis.ErrClosed, are no node failure, and do not open
// the breaker. They counted as failures: three opened the breaker (the
// fourth read "circuit breaker is open"), and a stale client held across
// an outage kept a healthy node's breaker open for every other caller.
func TestClosedClientIsNoNodeFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := redistest.Start(t, redistest.Options{})
	var failures atomic.Int32
	n := newNode(t, node.Options{Name: "n1", Addr: s.Addr(), BreakerFailures: 3}, &failures)
	if err := n.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	n.SetUp()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := n.Client().Get(ctx, "k").Err(); !errors.Is(err, redis.ErrClosed) {
			t.Fatalf("command %d after Close: %v, want redis.ErrClosed", i, err)
		}
	}
	if f, st := failures.Load(), n.BreakerState(); f != 0 || st != "closed" {
		t.Errorf("after 5 commands on a closed client: %d failures reported, breaker %s; want 0, closed", f, st)
	}
}

// While the breaker's half-open trial is in flight every other command is
// refused, so Usable says no: it said yes (open past its timeout), and a
// route's Pick sent commands to a node that refused them all, where the
// next policy would have gone to the next node.
func TestUsableIsFalseWhileTheTrialIsInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, n := openedOnPause(t, ctx, 2*time.Second)
	defer s.Resume()
	if st := n.BreakerState(); st != "open" {
		t.Fatalf("breaker %s after a timeout, want open", st)
	}
	time.Sleep(250 * time.Millisecond) // past the open timeout
	if !n.Usable() {
		t.Fatal("Usable is false past the open timeout, before the trial")
	}
	trial := make(chan error, 1)
	go func() { trial <- n.Client().Get(ctx, "k").Err() }() // the trial, hanging on the paused server
	time.Sleep(100 * time.Millisecond)                      // the trial taken (it waits on the server)
	if st := n.BreakerState(); st != "half-open" {
		t.Fatalf("breaker %s with the trial in flight, want half-open", st)
	}
	if n.Usable() {
		err := n.Client().Get(ctx, "k").Err()
		t.Errorf("Usable is true while the half-open trial is in flight; a command then got %v", err)
	}
	s.Resume()
	<-trial
}
