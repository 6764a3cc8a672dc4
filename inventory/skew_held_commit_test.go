package inventory

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// A one-round reservation on a home at the real clock whose part nodes
// run 900 ms ahead (n2) and behind (n3), inside the second SECURITY.md
// ("Clock skew") asks nodes to keep, while its instance is paused after
// answering (its commit held until after Confirm) and, in one case, its
// stage reached the home 1.5 s after its takes reached their nodes (the
// part on n2 comes due 1.4 s before the order's deadline). The reconciler
// runs throughout. The promise checked: the reservation Reserve
// acknowledged is confirmed by a Confirm sent before the Deadline Reserve
// told, every part follows, and the stock adds up.
func TestSkewHeldCommitConfirmedBeforeTheToldDeadline(t *testing.T) {
	t.Parallel()
	for _, stageDelay := range []time.Duration{0, 1500 * time.Millisecond} {
		t.Run(fmt.Sprintf("stage-late-%v", stageDelay), func(t *testing.T) {
			e := newSkewEnv(t)
			e.skew("n2", 900)
			e.skew("n3", -900)
			id := e.homedOn("held", "n1")

			release := make(chan struct{})
			var once sync.Once
			hook := &hookFaults{call: func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
				switch {
				case orderOpOf(c) == "commit":
					<-release
				case c.Script == "stage-take" && stageDelay > 0:
					once.Do(func() { time.Sleep(stageDelay) })
				}
				return send()
			}}
			held, err := New(e.r, Options{Logger: slog.New(slog.DiscardHandler), AttemptLease: stagedLease, Faults: hook, CarryWait: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(held.Close)
			defer once.Do(func() {})
			res, err := held.Reserve(e.ctx, id, stagedItems(), "", 3*time.Second)
			if err != nil {
				close(release)
				t.Logf("Reserve refused (no promise to keep): %v", err)
				e.expireAll()
				e.stock()
				return
			}
			t.Logf("Reserve answered, deadline in %v", time.Until(res.Deadline).Round(time.Millisecond))
			did := map[Resolution]int{}
			// passes until 800 ms before the deadline (the part on n2 is
			// due from 1.4 s before it in the stage-late case): the last
			// pass and the Confirm get the rest, 800 ms rather than 400
			// for a loaded machine
			for time.Until(res.Deadline) > 800*time.Millisecond {
				for r, k := range e.pass() {
					did[r] += k
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("reconciler before the deadline: %v", did)
			out, cerr := e.inv.Confirm(e.ctx, id)
			close(release)
			if cerr != nil || out.Status != StatusConfirmed || out.PendingParts != 0 {
				t.Fatalf("Confirm %v before the told deadline = %+v, %v", time.Until(res.Deadline).Round(time.Millisecond), out, cerr)
			}
			e.expireAll()
			e.verify(id, "confirmed")
			e.stock()
		})
	}
}
