package pgsync_test

import (
	"context"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/pgsync"
)

// hangOnSettledRead, once armed, makes the first settled-log read of node
// (a follow step, inside its settle transaction) meet a hung node and a
// hung database at once: it pauses the Redis node (SIGSTOP) and every
// PostgreSQL process (SIGSTOP), then sends the call, which waits on the
// paused node until the step's deadline.
type hangOnSettledRead struct {
	node    string
	armed   atomic.Bool
	fired   atomic.Bool
	pause   func()
	entered chan struct{}
}

func (f *hangOnSettledRead) Call(_ context.Context, c inventory.ScriptCall, send func() (any, error)) (any, error) {
	if f.armed.Load() && c.Node == f.node && c.Script == "settled-read" && f.fired.CompareAndSwap(false, true) {
		f.pause()
		close(f.entered)
	}
	return send()
}

func (f *hangOnSettledRead) Crash(context.Context, string) bool { return false }

// TestCloseReturnsWithDatabaseHung checks Settings.StepTimeout's promise
// that a hung database or node cannot stall a worker, so Syncer.Close
// (SIGTERM of `shardis sync`) returns: a settle step whose node read
// outlives the step's deadline while PostgreSQL is hung (SIGSTOP, as a
// partitioned host) rolls its transaction back within min(StepTimeout,
// 5s) (Syncer.rollback), and Close returns within 10s (StepTimeout 1s).
// Found by a review: the rollbacks used context.WithoutCancel with no
// deadline, so the worker waited on the hung server for as long as it
// hung, and Close did not return until PostgreSQL was resumed.
func TestCloseReturnsWithDatabaseHung(t *testing.T) {
	t.Parallel() // its own nodes and server; it mostly waits deadlines out
	e := newEnvOwnPG(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, _, err := pgsync.Migrate(ctx, e.pool); err != nil {
		t.Fatal(err)
	}
	pgPid := e.pg.Pid()
	// PostgreSQL's children call setsid: signal the postmaster and each
	// of its children, as a hung host would stop them all
	var pgPids []int
	signalPG := func(sig syscall.Signal) {
		for _, pid := range pgPids {
			_ = syscall.Kill(pid, sig)
		}
	}
	var pgPaused atomic.Bool
	resume := func() {
		if pgPaused.CompareAndSwap(true, false) {
			signalPG(syscall.SIGCONT)
		}
	}
	f := &hangOnSettledRead{node: "n1", entered: make(chan struct{}), pause: func() {
		e.srv["n1"].Pause()
		out, _ := exec.Command("pgrep", "-P", strconv.Itoa(pgPid)).Output()
		pgPids = []int{pgPid}
		for _, l := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(l); err == nil {
				pgPids = append(pgPids, pid)
			}
		}
		pgPaused.Store(true)
		signalPG(syscall.SIGSTOP)
	}}
	t.Cleanup(func() { resume(); e.srv["n1"].Resume() })
	inv, err := inventory.New(e.stack.Router, inventory.Options{Logger: quiet(), Faults: f})
	if err != nil {
		t.Fatal(err)
	}
	m := pgsync.NewMetrics(nil)
	s := pgsync.New(inv, e.pool, pgsync.Settings{PollInterval: 20 * time.Millisecond, SettleInterval: 50 * time.Millisecond,
		RetryBackoff: 100 * time.Millisecond, StepTimeout: time.Second, Logger: quiet(), Metrics: m})
	s.Start()
	waitFor(t, 15*time.Second, "the first walks (the settle loops follow the settled log after them)", func() bool { return m.Walks() >= 3 })
	f.armed.Store(true)
	select {
	case <-f.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no follow step read n1's settled log")
	}
	time.Sleep(4 * time.Second) // the step's deadline (1s) and the node's command timeout (3s) pass

	closed := make(chan struct{})
	start := time.Now()
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
		t.Logf("Close returned after %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Errorf("Syncer.Close has not returned %v after it was called (StepTimeout 1s), with PostgreSQL hung: "+
			"a worker waits on a rollback without a deadline", time.Since(start).Round(time.Millisecond))
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "pgsync.(*worker)") && strings.Contains(g, "Rollback") {
				t.Logf("blocked worker:\n%s", g)
			}
		}
		resume()
		<-closed
		t.Logf("Close returned %v after it was called, once PostgreSQL was resumed", time.Since(start).Round(time.Millisecond))
	}
}
