package inventory

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/shardis/shardis/topology"
)

// gatedApply is the Faults of one of two applies a test interleaves: at
// its first crash point named point, or its first call of script on
// node, it runs hook (once); it stops at no crash point.
type gatedApply struct {
	point, script, node string
	hook                func()
	once                sync.Once
}

func (g *gatedApply) Call(_ context.Context, c ScriptCall, send func() (any, error)) (any, error) {
	if g.script != "" && c.Script == g.script && c.Node == g.node {
		g.once.Do(g.hook)
	}
	return send()
}

func (g *gatedApply) Crash(_ context.Context, point string) bool {
	if g.point != "" && point == g.point {
		g.once.Do(g.hook)
	}
	return false
}

func (g *gatedApply) Mutated(Mutation) bool { return false }

// TestConcurrentForwardsKeepThePutBack: order st is reserved on n3, its
// home, and n3 leaves: the removal moves st onto n2 (n3's copy marked
// moved). Then n2 goes back to a copy from before the removal, without
// st's record. Two applies bring n2 forward at once: A1 puts st back on
// n2 and pauses; A2 reads n2 behind, plans and retires, and pauses at its
// own put back; A1 brings n2 forward and ends; A2's put back is refused
// at n2's new token. st must stay live on n2. Before the put backs were
// planned ahead of the retirement (apply_putback.go), A2 retired the
// record A1 had put back as stale, and a rerun found every node stable:
// st had no live record anywhere (a review found it with this
// interleaving).
func TestConcurrentForwardsKeepThePutBack(t *testing.T) {
	e, three, two, _ := retireWorld(t)
	ctx := e.ctx
	id := movedN3ToN2(t, three, two)
	quiet := slog.New(slog.DiscardHandler)
	reservedCopy(t, e, three, id)
	n2 := e.clients["n2"]
	old2 := copyEpoch(t, n2)
	if rep, err := ApplyTopology(ctx, ApplyOptions{To: two, From: three, Wait: 5 * time.Second, Logger: quiet}); err != nil || rep.OrdersMoved != 1 {
		t.Fatalf("removal of n3 = %+v, %v; want 1 order moved", rep, err)
	}
	old2.restore(t, n2)
	if err := n2.Del(ctx, orderKey(id)).Err(); err != nil {
		t.Fatal(err)
	}
	a1PutBack, a2AtPutBack, a1Done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var release sync.Once
	a1 := &gatedApply{point: "reinstall", hook: func() { close(a1PutBack); <-a2AtPutBack }}
	a2 := &gatedApply{script: orderInstallScript.name, node: "n2", hook: func() { release.Do(func() { close(a2AtPutBack) }); <-a1Done }}
	forward := func(f Faults) (topology.Report, error) {
		return ApplyTopology(ctx, ApplyOptions{To: two, From: three, Wait: 5 * time.Second, Logger: quiet, Faults: f})
	}
	var rep1 topology.Report
	var err1 error
	go func() {
		defer close(a1Done)
		rep1, err1 = forward(a1)
	}()
	select {
	case <-a1PutBack:
	case <-a1Done:
		t.Fatalf("A1 ended before its put back: %+v, %v", rep1, err1)
	}
	rep2, err2 := forward(a2)
	release.Do(func() { close(a2AtPutBack) }) // A2 ended before its put back: let A1 go on
	<-a1Done
	if err1 != nil || len(rep1.Forward) != 1 || rep1.Reinstalled != 1 {
		t.Fatalf("A1 = %+v, %v; want n2 brought forward, 1 put back", rep1, err1)
	}
	if rep, err := forward(nil); err != nil || !rep.AlreadyApplied {
		t.Fatalf("the rerun = %+v, %v; want already applied", rep, err)
	}
	if f := orderFieldsOn(t, ctx, n2, id); f["status"] != string(OrderReserved) || f["moved"] != "" {
		t.Fatalf("order %s on n2, its home: %v; want its record live, reserved", id, f)
	}
	if out, err := openInv(t, two, Options{}).Confirm(ctx, id); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm %s after both forwards = %+v, %v", id, out, err)
	}
	if err2 == nil || rep2.Retired != 0 {
		t.Fatalf("A2 = %+v, %v; want nothing retired, its put back refused at n2's new token", rep2, err2)
	}
}

// TestPutBackReplacesAStaleRecordInPlace: order_install.lua with
// "replace" (a put back) writes the newest record over a live one, after
// writing the records of the live one's inline parts (it was written by
// the local reserve: its part lives in it alone), so the reconcilers
// still settle the units that part holds; the same put back again
// answers "exists". Without "replace" (step 3's install) the live record
// is kept.
func TestPutBackReplacesAStaleRecordInPlace(t *testing.T) {
	e := newGroupEnv(t, 32)
	ctx, c, inv := e.ctx, e.admin, e.inv
	if _, err := inv.LoadStock(ctx, "a", "s", 100, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.Reserve(ctx, "pb-1", []Item{{Route: "a", SKU: "s", Quantity: 3}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	stale := orderFieldsOn(t, ctx, c, "pb-1")
	pid := stockPartID("pb-1", stale["token"], 0)
	if n := c.Exists(ctx, partKey(pid)).Val(); n != 0 || stale["reserved_at"] != "" {
		t.Fatalf("order pb-1 after the local reserve: %v, part key %d; want its part inline", stale, n)
	}
	newest := maps.Clone(stale)
	newest["status"], newest["reserved_at"], newest["decided_at"] = string(OrderConfirmed), stale["created"], stale["created"]
	newest["moved"] = "9:copy"
	v, err := packOrder(newest)
	if err != nil {
		t.Fatal(err)
	}
	install := func(args ...any) bool {
		t.Helper()
		out, err := inv.run(ctx, e.n, orderInstallScript, []string{orderKey("pb-1")}, args...)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := decodeInstall("n1", out)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if install(-1, v) || !maps.Equal(orderFieldsOn(t, ctx, c, "pb-1"), stale) {
		t.Fatalf("step 3's install over the live record: %v; want it kept", orderFieldsOn(t, ctx, c, "pb-1"))
	}
	if !install(-1, v, "replace") {
		t.Fatal(`the put back over the stale record answered "exists"`)
	}
	if f := orderFieldsOn(t, ctx, c, "pb-1"); f["status"] != string(OrderConfirmed) || f["moved"] != "" {
		t.Fatalf("order pb-1 put back: %v; want the newest record, live", f)
	}
	if f, _ := ReadPart(ctx, c, pid).Fields(); f["state"] != string(PartPending) || f["qty"] != "3" {
		t.Fatalf("part %s after the put back: %v; want its own record, pending, 3 units", pid, f)
	}
	if install(-1, v, "replace") {
		t.Fatal(`the same put back again answered "installed"; want "exists"`)
	}
}
