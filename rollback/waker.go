package rollback

import (
	"sync/atomic"

	"github.com/shardis/shardis/health"
)

// Waker hands the router's node-up events to a reconciler that does not
// exist yet when the router is built (the reconciler needs the inventory,
// which needs the router). Pass its OnStateChange as the router's
// Options.OnStateChange, then Set the reconciler: a node that comes back
// before Set waits for the reconciler's next pass, one after it gets a
// pass at once ([Reconciler.NodeUp]). The zero value is ready to use.
type Waker struct {
	r atomic.Pointer[Reconciler]
}

// Set makes r the reconciler woken from now on.
func (w *Waker) Set(r *Reconciler) { w.r.Store(r) }

// OnStateChange calls NodeUp on the reconciler set, if any, when ev is a
// node coming up; it never blocks.
func (w *Waker) OnStateChange(ev health.Event) {
	if r := w.r.Load(); r != nil && ev.Up {
		r.NodeUp(ev.Target)
	}
}
