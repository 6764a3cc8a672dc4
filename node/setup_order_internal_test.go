package node

import (
	"errors"
	"runtime"
	"testing"
	"time"
)

// SetUp publishes UP only after the fresh breaker is in place: a command
// that sees the node UP never meets the breaker its DOWN spell opened
// (before, the state was swapped first, and a command in that window was
// refused "breaker open" by a node that had just been proved healthy).
func TestSetUpPublishesUpLast(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two threads to watch the window")
	}
	n, err := New(Options{Name: "n1", Addr: "127.0.0.1:1", BreakerFailures: 1, BreakerOpenTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	trip := func() {
		done, err := n.guard.Load().cb.Allow()
		if err == nil {
			done(errors.New("drill failure"))
		}
	}
	for i := range 3000 {
		n.SetDown(errors.New("drill"))
		trip()
		if s := n.BreakerState(); s != "open" {
			t.Fatalf("breaker %s after a failure with BreakerFailures 1", s)
		}
		seen := make(chan string)
		go func() {
			for State(n.state.Load()) != StateUp {
			}
			seen <- n.guard.Load().cb.State().String()
		}()
		runtime.Gosched()
		n.SetUp()
		if s := <-seen; s != "closed" {
			t.Fatalf("iteration %d: the node was UP with its breaker %s", i, s)
		}
	}
}
