package inventory

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// Two reconcilers race on one due part of a confirmed order whose settle did
// not land: A reads the decision and pauses before its settle (past any
// lease), B settles the part meanwhile, then A's settle runs. The part is
// confirmed once; the stock adds up.
func TestTwoReconcilersSettleADuePartOnce(t *testing.T) {
	t.Parallel() // it mostly waits a deadline out
	e := newShortRetentionEnv(t, 30*time.Second)
	if _, err := e.inv.LoadStock(e.ctx, "b", "t", 2, 0); err != nil {
		t.Fatal(err)
	}
	items := []Item{{Route: "b", SKU: "t", Quantity: 2}}
	x := e.awayOrder("rx")
	noSettle := &hookFaults{call: func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if c.Script == "settle" && c.Node == "n2" {
			return nil, errors.New("n2 unreachable (injected)")
		}
		return send()
	}}
	conf := e.faultyInstance(noSettle)
	if _, err := e.inv.Reserve(e.ctx, x, items, "", time.Second); err != nil {
		t.Fatal(err)
	}
	if out, err := conf.Confirm(e.ctx, x); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm: %+v %v", out, err)
	}
	p := e.dueOf("n2", x)
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	slow := &hookFaults{call: func(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
		if c.Script == "settle" && c.Node == "n2" {
			once.Do(func() { close(paused) })
			<-resume
		}
		return send()
	}}
	a := e.faultyInstance(slow)
	var resA Resolution
	var errA error
	done := make(chan struct{})
	go func() { resA, errA = a.ResolveExpired(e.ctx, p); close(done) }()
	e.wait(paused, "A paused before its settle")
	resB, errB := e.inv.ResolveExpired(e.ctx, p)
	close(resume)
	<-done
	t.Logf("A: %v %v; B: %v %v", resA, errA, resB, errB)
	if resB != Confirmed || resA != AlreadySettled {
		t.Errorf("A %v, B %v; want already, confirmed", resA, resB)
	}
	for id, st := range e.partsOf(x) {
		if st != "confirmed" {
			t.Errorf("part %s is %s", id, st)
		}
	}
	lvl, _ := e.inv.GetStock(e.ctx, "b", "t")
	if lvl.Confirmed != 2 || lvl.Reserved != 0 || lvl.Available != 0 {
		t.Errorf("stock %+v", lvl)
	}
}
