package inventory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardis/shardis/node"
)

// Late shares of a load.
//
// A load call whose reply is lost (a timeout, a connection cut, a node
// paused mid-call) may still reach its node later. Before, LoadStock's
// error told the operator to read GetStock and load what is missing, and
// a share that landed after that read was loaded twice (30 units meant,
// 40 loaded: found by a review). So every load call carries a deadline by
// its own node's clock, and LoadStock answers only once none of its calls
// can land any more.
//
// States of one node's share, each call's:
//
//	sent ──reaches the node by its deadline──▶ added (load.lua)
//	sent ──reaches it after its deadline─────▶ refused: SHARDIS_LATE, nothing added
//	sent ──never reaches it───────────────────▶ nothing added
//
// The deadline is the node's clock (TIME, read just before the call:
// loadDeadlines) plus loadWindow, and load.lua compares it with the
// node's clock when the call runs, before any write. When a share's
// outcome is unknown, LoadStock waits until loadSettled: loadWindow plus
// maxNodeSkew after it began reading the clocks, by its own monotonic
// clock. A call that runs on another server process than the one whose
// clock was read (a Sentinel failover in between) compares with that
// process's clock, which SECURITY.md ("Clock skew") keeps within
// maxNodeSkew of the first. So once loadSettled has passed, every call of
// the load is added or never will be, and what GetStock reads is all the
// load added: the error says so, and the advice to load what is missing
// adds each missing unit once. A caller whose context ends first is told
// the time to wait for instead. A call that ran already and could not be
// confirmed (ErrNotDurable, an unreadable reply: mayStillLand) lands no
// later, so it is not waited for.

// loadWindow is how long after its node's clock was read a load call may
// still add its share: above client.command_timeout's default (1s), so a
// call that answers in time is never refused as late.
const loadWindow = 2 * time.Second

// maxNodeSkew bounds how far two nodes' clocks may be apart (each kept
// within a second of true time: SECURITY.md, "Clock skew").
const maxNodeSkew = 2 * time.Second

// loadSettled is when no call of a load whose clocks were read from began
// on can add anything any more.
func loadSettled(began time.Time) time.Time {
	return began.Add(loadWindow + maxNodeSkew)
}

// loadDeadlines reads the clock of every node of calls at once and
// returns each call's deadline (the node's clock plus loadWindow, ms
// since the epoch), or, for a node whose clock could not be read, the
// read's error (the call is then not sent: nothing added there).
func loadDeadlines(ctx context.Context, calls []scriptCall) ([]int64, []error) {
	due := make([]int64, len(calls))
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func(i int, n *node.Node) {
			defer wg.Done()
			now, err := n.Client().Time(ctx).Result()
			if err != nil {
				errs[i] = nodeErr(n, err)
				return
			}
			due[i] = now.Add(loadWindow).UnixMilli()
		}(i, calls[i].n)
	}
	wg.Wait()
	return due, errs
}

// awaitLoadSettled waits until loadSettled(began), or ctx ends; it
// reports whether that time has passed.
func awaitLoadSettled(ctx context.Context, began time.Time) bool {
	wait := time.Until(loadSettled(began))
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// mayStillLand reports whether a load call that failed with err may still
// reach its node: its outcome is unknown (outcomeUnknown) and the call did
// not run already (a script that ran on the master but no replica
// acknowledged, [ErrNotDurable], or whose reply could not be read,
// [ErrMalformedReply], is there or lost with a failover: it lands no
// later).
func mayStillLand(err error) bool {
	return outcomeUnknown(err) && !errors.Is(err, ErrNotDurable) && !errors.Is(err, ErrMalformedReply)
}

// lateAdvice is what loadFailed says of the nodes named maybe (their
// share's outcome unknown), inFlight telling whether a call of theirs may
// still be on its way (mayStillLand), settled whether loadSettled(began)
// has passed.
func lateAdvice(maybe string, began time.Time, inFlight, settled bool) string {
	if !inFlight {
		return fmt.Sprintf("; %s ran the load but it could not be confirmed (not acknowledged by a replica, or its reply unreadable): "+
			"their share is on the node unless a failover lost it, and GetStock shows it", maybe)
	}
	if settled {
		return fmt.Sprintf("; %s may have added their share too (outcome unknown); no call of this load adds anything after its deadline "+
			"(the node's clock when it was sent plus %v), which has passed, so GetStock now shows all it added", maybe, loadWindow)
	}
	return fmt.Sprintf("; %s may have added their share too (outcome unknown), or may still add it until %s (this process's clock): "+
		"read GetStock after that", maybe, loadSettled(began).Format(time.RFC3339Nano))
}
