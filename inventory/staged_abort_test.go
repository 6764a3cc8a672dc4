package inventory

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// A failed one-round attempt releases, at once, what it took on every node
// it reaches, whatever state its home node is in (staged.go, "Abort"); the
// order then ends failed, every part settled once, the stock adding up.

// dropStageReply is a Faults that lets the next stage-take call run on its
// node and loses its reply (the outcome is unknown to the attempt).
type dropStageReply struct {
	crashPoint
	armed atomic.Bool
}

func (d *dropStageReply) Call(_ context.Context, c ScriptCall, send func() (any, error)) (any, error) {
	v, err := send()
	if c.Script == stageTakeScript.name && d.armed.CompareAndSwap(true, false) {
		return nil, fmt.Errorf("stage-take reply on %s lost: %w", c.Node, ErrCrashed)
	}
	return v, err
}

// homedOn returns an order id whose home node is name.
func (e *stagedEnv) homedOn(prefix, name string) string {
	for i := 0; ; i++ {
		if id := fmt.Sprintf("%s-%d", prefix, i); e.inv.topo.cur.Load().homes.Home(id) == name {
			return id
		}
	}
}

// available returns route rt's available units of SKU s.
func (e *stagedEnv) available(rt string) int64 {
	e.t.Helper()
	lvl, err := e.inv.GetStock(e.ctx, rt, "s")
	if err != nil {
		e.t.Fatal(err)
	}
	return lvl.Available
}

// twoItems is an order of route a (n1) and route b (n2): homed on n2, its
// item on b is staged with the record and its item on a is taken on n1.
func twoItems() []Item {
	return []Item{{Route: "a", SKU: "s", Quantity: 1}, {Route: "b", SKU: "s", Quantity: 2}}
}

// finishFailed waits past the order's deadline, lets the reconciler settle
// what is left, and checks the order ended failed with its parts
// cancelled once and the stock adding up.
func (e *stagedEnv) finishFailed(id string) {
	e.t.Helper()
	time.Sleep(stagedTTL + partGrace + 100*time.Millisecond)
	e.expireAll()
	if _, err := e.inv.Confirm(e.ctx, id); !errors.Is(err, ErrNotFound) {
		e.t.Fatalf("Confirm of the failed order: %v, want ErrNotFound", err)
	}
	e.expireAll()
	e.verify(id, "failed", "missing")
	e.stock()
}

// The home node frozen (SIGSTOP) while the stage is on its way: the stage
// times out, and the part taken on the healthy node n1 is back at once.
func TestStagedAbortHomePaused(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t)
	id := e.homedOn("paused", "n2")
	e.srvs[1].Pause()
	_, err := e.inv.Reserve(e.ctx, id, twoItems(), "", stagedTTL)
	if !errors.Is(err, ErrUnavailable) {
		e.srvs[1].Resume()
		t.Fatalf("Reserve with its home node frozen = %v, want ErrUnavailable", err)
	}
	got := e.available("a")
	e.srvs[1].Resume()
	if got != stagedStock {
		t.Fatalf("route a (healthy n1) right after the failed Reserve: %d available, want %d (the take released at once)", got, stagedStock)
	}
	e.finishFailed(id)
}

// The stage ran but its reply was lost: the healthy node's part is back
// when Reserve returns, the home node's soon after (the attempt decides
// its record failed off the caller's path).
func TestStagedAbortStageReplyLost(t *testing.T) {
	t.Parallel()
	e := newStagedEnv(t)
	drop := &dropStageReply{}
	inv, err := New(e.r, Options{Logger: e.inv.log, AttemptLease: stagedLease, Faults: drop})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inv.Close)
	id := e.homedOn("lost", "n2")
	drop.armed.Store(true)
	if _, err := inv.Reserve(e.ctx, id, twoItems(), "", stagedTTL); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Reserve whose stage reply was lost = %v, want ErrUnavailable", err)
	}
	if got := e.available("a"); got != stagedStock {
		t.Fatalf("route a (n1) right after the failed Reserve: %d available, want %d (the take released at once)", got, stagedStock)
	}
	inv.Close() // the record's decision off the caller's path
	if got := e.available("b"); got != stagedStock {
		t.Fatalf("route b (the home n2) once the attempt finished: %d available, want %d", got, stagedStock)
	}
	e.finishFailed(id)
}

// A part a probe saw pending is held: the attempt's abort leaves it to
// the record's decision; a part no probe saw is aborted, and a probe after
// that decides the order failed.
func TestStagedAbortSparesHeldParts(t *testing.T) {
	e := newStagedEnv(t)
	id := e.homedOn("held", "n3")
	if _, err := e.reserveAtTTL("staged:before-commit", id, time.Hour); !errors.Is(err, errCrashed) {
		t.Fatalf("Reserve stopped before the commit: %v", err)
	}
	home, _ := e.r.Node("n3")
	rec, err := e.inv.orderOp(e.ctx, home, id, opConfirm, "", seconds(e.inv.cfg.Retention))
	if err != nil || rec.status != recStaging || len(rec.parts) != 3 {
		t.Fatalf("record before the probe: %+v, %v; want staging with 3 parts", rec, err)
	}
	if v, _, err := e.inv.probeStaged(e.ctx, id, rec, false); err != nil || v != verdictReserved {
		t.Fatalf("inspect probe: %v, %v; want every part pending", v, err)
	}
	if left := e.inv.abortParts(e.ctx, id, rec.parts); left != 3 {
		t.Fatalf("abort after a probe left %d parts pending, want all 3 (held)", left)
	}
	out, err := e.inv.Confirm(e.ctx, id)
	if err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm of the held order: %+v, %v", out, err)
	}
	e.verify(id, "confirmed")

	id = e.homedOn("unheld", "n3")
	if _, err := e.reserveAt("staged:before-commit", id); !errors.Is(err, errCrashed) {
		t.Fatalf("Reserve stopped before the commit: %v", err)
	}
	var away []part
	rec, _ = e.inv.orderOp(e.ctx, home, id, opConfirm, "", seconds(e.inv.cfg.Retention))
	for _, p := range rec.parts {
		if p.Node != "n3" {
			away = append(away, p)
		}
	}
	if left := e.inv.abortParts(e.ctx, id, away); left != 0 {
		t.Fatalf("abort with no probe left %d parts pending, want 0", left)
	}
	if _, err := e.inv.Confirm(e.ctx, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Confirm after the abort: %v, want ErrNotFound (failed)", err)
	}
	e.verify(id, "failed")
	e.stock()
}

// The home node killed just before the order: the stage fails on the
// network (or is refused once the node is seen down); either way the part
// taken on n1 is back when Reserve returns.
func TestStagedAbortHomeKilled(t *testing.T) {
	e := newStagedEnv(t)
	id := e.homedOn("killed", "n2")
	e.srvs[1].Kill()
	if _, err := e.inv.Reserve(e.ctx, id, twoItems(), "", stagedTTL); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Reserve with its home node killed = %v, want ErrUnavailable", err)
	}
	if got := e.available("a"); got != stagedStock {
		t.Fatalf("route a (healthy n1) right after the failed Reserve: %d available, want %d (the take released at once)", got, stagedStock)
	}
}
