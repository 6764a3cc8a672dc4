package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// closedWithin reports whether commands on c fail with redis.ErrClosed
// within limit.
func closedWithin(c *redis.Client, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if errors.Is(err, redis.ErrClosed) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Sentinel group's DOWN→UP replaces the witness client and the replica
// read client (renewed.go) without cutting off a caller that fetched the
// old one: it is closed only after the retirement delay. Close closes
// the current and the retired ones; a read client never built is not
// built after Close. A standalone node keeps its witness client.
func TestReview3SetUpRenewsWitnessAndReadClients(t *testing.T) {
	n, err := New(Options{
		Name: "r", Sentinel: &SentinelOptions{Master: "m", Addrs: []string{"127.0.0.1:1"}, ReadFromReplicas: true},
		CommandTimeout: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	side0, read0 := n.side.get(), n.ReadClient()
	if !n.SetUp() {
		t.Fatal("SetUp on a new node reported no change")
	}
	side1, read1 := n.side.get(), n.ReadClient()
	if side1 == side0 || read1 == read0 {
		t.Fatalf("DOWN→UP kept the witness client (%v) or the read client (%v)", side1 == side0, read1 == read0)
	}
	if closedWithin(side0, 0) || closedWithin(read0, 0) {
		t.Fatal("a replaced client was closed at once, under its callers")
	}
	if !closedWithin(side0, 10*time.Second) || !closedWithin(read0, 10*time.Second) {
		t.Fatal("a replaced client was not closed after its retirement delay")
	}
	if n.SetUp() || n.side.get() != side1 {
		t.Fatal("SetUp on an UP node renewed the witness client")
	}
	n.SetDown(errors.New("drill"))
	n.SetUp()
	side2 := n.side.get()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(side1, 0) || !closedWithin(side2, 0) || !closedWithin(n.ReadClient(), 0) {
		t.Fatal("Close left a witness or read client open")
	}

	lazy, err := New(Options{Name: "l", Sentinel: &SentinelOptions{Master: "m", Addrs: []string{"127.0.0.1:1"}, ReadFromReplicas: true}})
	if err != nil {
		t.Fatal(err)
	}
	_ = lazy.Close()
	if lazy.read.get() != nil || lazy.ReadClient() != lazy.Client() {
		t.Fatal("a read client was built after Close")
	}

	plain, err := New(Options{Name: "p", Addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	s := plain.side.get()
	plain.SetUp()
	if plain.side.get() != s {
		t.Fatal("a standalone node's witness client was renewed")
	}
}

// A Sentinel group that stays UP while its probe reaches another master
// (the switch was never seen to fail) has its clients renewed at the
// SetUp after that probe, and only then: a SetUp at the same master
// renews nothing.
func TestReview3SetUpRenewsWhenMasterMovedWhileUp(t *testing.T) {
	n, err := New(Options{
		Name: "m", Sentinel: &SentinelOptions{Master: "m", Addrs: []string{"127.0.0.1:1"}},
		CommandTimeout: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	a, b := "127.0.0.1:7001", "127.0.0.1:7002"
	n.masterAddr.Store(&a)
	n.SetUp()
	side, cmd := n.side.get(), n.Client()
	if n.SetUp() || n.side.get() != side || n.Client() != cmd {
		t.Fatal("SetUp at the same master renewed the clients")
	}
	n.masterAddr.Store(&b)
	if n.SetUp() {
		t.Fatal("SetUp of an UP node reported a change")
	}
	if n.side.get() == side || n.Client() == cmd {
		t.Fatalf("the master moved from %s to %s while UP; SetUp kept the witness client (%v) or the command client (%v)",
			a, b, n.side.get() == side, n.Client() == cmd)
	}
	side = n.side.get()
	n.SetUp()
	if n.side.get() != side {
		t.Fatal("a second SetUp at the new master renewed the clients again")
	}
}
