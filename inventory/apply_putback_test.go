package inventory

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
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
// interleaving). In "home-back", n3 goes back to a copy from before the
// removal once A1 put st back: A2 plans nothing (n3 holds no mark at the
// token) and would retire what A1 put back but for its memory of the put
// back (putBackKey); it brings n2 forward itself.
func TestConcurrentForwardsKeepThePutBack(t *testing.T) {
	t.Parallel() // its own nodes
	t.Run("plan", func(t *testing.T) { concurrentForwards(t, false) })
	t.Run("home-back", func(t *testing.T) { concurrentForwards(t, true) })
}

// concurrentForwards is TestConcurrentForwardsKeepThePutBack's scenario;
// homeBack sends n3 back once A1 put st back.
func concurrentForwards(t *testing.T, homeBack bool) {
	w := n2WentBack(t, false)
	ctx, id, n2 := w.e.ctx, w.id, w.e.clients["n2"]
	a1PutBack, a2AtPutBack, a1Done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var release sync.Once
	a1 := &gatedApply{point: "reinstall", hook: func() { close(a1PutBack); <-a2AtPutBack }}
	a2 := &gatedApply{script: orderInstallScript.name, node: "n2", hook: func() { release.Do(func() { close(a2AtPutBack) }); <-a1Done }}
	forward := w.forward
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
	if homeBack {
		w.n3Back(t)
	}
	rep2, err2 := forward(a2)
	release.Do(func() { close(a2AtPutBack) }) // A2 ended before its put back: let A1 go on
	<-a1Done
	if !homeBack && (err1 != nil || len(rep1.Forward) != 1 || rep1.Reinstalled != 1) {
		t.Fatalf("A1 = %+v, %v; want n2 brought forward, 1 put back", rep1, err1)
	}
	if rep, err := forward(nil); err != nil || !rep.AlreadyApplied {
		t.Fatalf("the rerun = %+v, %v; want already applied", rep, err)
	}
	if f := orderFieldsOn(t, ctx, n2, id); f["status"] != string(OrderReserved) || f["moved"] != "" {
		t.Fatalf("order %s on n2, its home: %v; want its record live, reserved", id, f)
	}
	if out, err := openInv(t, w.two, Options{}).Confirm(ctx, id); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm %s after both forwards = %+v, %v", id, out, err)
	}
	switch {
	case homeBack && (err2 != nil || rep2.Retired != 0 || len(rep2.Forward) != 1):
		t.Fatalf("A2 = %+v, %v; want n2 brought forward, nothing retired", rep2, err2)
	case !homeBack && (err2 == nil || rep2.Retired != 0):
		t.Fatalf("A2 = %+v, %v; want nothing retired, its put back refused at n2's new token", rep2, err2)
	}
}

// TestRerunKeepsWhatWasPutBack: as TestConcurrentForwardsKeepThePutBack,
// one forward at a time: the forward puts st back on n2 and dies at
// crash point "reinstall" (n2 still behind); then n3, the previous home
// holding st's marked copy, goes back to its older copy. The rerun plans
// nothing for st (n3 is not at the token) and must not retire the record
// the first run put back (putBackKey): before, st was left with no live
// record at its home (found by a review).
func TestRerunKeepsWhatWasPutBack(t *testing.T) {
	w := n2WentBack(t, false)
	ctx, id, n2 := w.e.ctx, w.id, w.e.clients["n2"]
	if _, err := w.forward(crashAtPoint("reinstall")); !errors.Is(err, ErrCrashed) {
		t.Fatalf("the forward crashed at reinstall = %v, want ErrCrashed", err)
	}
	w.n3Back(t)
	rep, err := w.forward(nil)
	if err != nil || len(rep.Forward) != 1 || rep.Retired != 0 || rep.Reinstalled != 0 {
		t.Fatalf("the rerun = %+v, %v; want n2 brought forward, nothing retired or put back", rep, err)
	}
	if f := orderFieldsOn(t, ctx, n2, id); f["status"] != string(OrderReserved) || f["moved"] != "" {
		t.Fatalf("order %s on n2, its home: %v; want the record put back, live", id, f)
	}
	if out, err := openInv(t, w.two, Options{}).Confirm(ctx, id); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm %s after the rerun = %+v, %v", id, out, err)
	}
}

// TestPutBackReplacesAStaleRecordInPlace: order_install.lua with
// "replace" (a put back) writes the newest record over a live one, after
// writing the records of the live one's inline parts (it was written by
// the local reserve: its part lives in it alone), so the reconcilers
// still settle the units that part holds, and remembers the put back
// (putBackKey, for the TTL given); the same put back again answers
// "exists". Without "replace" (step 3's install) the live record is
// kept.
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
		keys := []string{orderKey("pb-1"), putBackKey("9:copy", "pb-1")}
		out, err := inv.run(ctx, e.n, orderInstallScript, keys, args...)
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
	if !install(-1, v, "replace", 60) {
		t.Fatal(`the put back over the stale record answered "exists"`)
	}
	if f := orderFieldsOn(t, ctx, c, "pb-1"); f["status"] != string(OrderConfirmed) || f["moved"] != "" {
		t.Fatalf("order pb-1 put back: %v; want the newest record, live", f)
	}
	if f, _ := ReadPart(ctx, c, pid).Fields(); f["state"] != string(PartPending) || f["qty"] != "3" {
		t.Fatalf("part %s after the put back: %v; want its own record, pending, 3 units", pid, f)
	}
	if install(-1, v, "replace", 60) {
		t.Fatal(`the same put back again answered "installed"; want "exists"`)
	}
	if ttl := c.TTL(ctx, putBackKey("9:copy", "pb-1")).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("the put back's memory has TTL %v; want the 60 s given", ttl)
	}
}

// TestPutBackOfAGoneCopyRetires: order st was moved from n3 onto n2, and
// n2 went back to an older copy holding st's record from before the move.
// The forward plans st's put back, so it does not retire that older
// record; when n3's marked copy is gone by the time the put back reads
// it (here deleted just then: an expiry after the retention), the put
// back retires the older record instead, as the retirement would have:
// it is not the order's current record (the review's window between the
// plan and the put back).
func TestPutBackOfAGoneCopyRetires(t *testing.T) {
	w := n2WentBack(t, true)
	ctx, id, n3 := w.e.ctx, w.id, w.e.clients["n3"]
	expire := &gatedApply{script: orderMoveOutScript.name, node: "n3", hook: func() {
		if err := n3.Del(ctx, orderKey(id)).Err(); err != nil {
			t.Error(err)
		}
	}}
	rep, err := w.forward(expire)
	if err != nil || len(rep.Forward) != 1 || rep.Retired != 1 || rep.Reinstalled != 0 {
		t.Fatalf("the forward = %+v, %v; want n2 brought forward, 1 retired, none put back", rep, err)
	}
	if f := orderFieldsOn(t, ctx, w.e.clients["n2"], id); f["moved"] == "" {
		t.Fatalf("order %s on n2: %v; want the older record retired", id, f)
	}
}

// wentBack is the put-back tests' world (n2WentBack).
type wentBack struct {
	e          *stagedEnv
	three, two *config.Config
	id, stale  string    // the order, and a copy (DUMP) of its record reserved on n3
	old1, old3 nodeEpoch // n1's and n3's topology records from before the removal
}

// n2WentBack builds the put-back tests' world: order id reserved on n3,
// its home in three, moved onto n2 by the removal of n3 (two, n3's copy
// marked moved); then n2 goes back to its copy from before the removal,
// holding id's record from then (withStale) or none.
func n2WentBack(t *testing.T, withStale bool) *wentBack {
	e, three, two, _ := retireWorld(t)
	w := &wentBack{e: e, three: three, two: two, id: movedN3ToN2(t, three, two)}
	_, w.stale = reservedCopy(t, e, three, w.id)
	n2 := e.clients["n2"]
	old2 := copyEpoch(t, n2)
	w.old1, w.old3 = copyEpoch(t, e.clients["n1"]), copyEpoch(t, e.clients["n3"])
	if rep, err := w.apply(nil, three); err != nil || rep.OrdersMoved != 1 {
		t.Fatalf("removal of n3 = %+v, %v; want 1 order moved", rep, err)
	}
	old2.restore(t, n2)
	lost := n2.Del(e.ctx, orderKey(w.id)).Err()
	if withStale {
		lost = n2.RestoreReplace(e.ctx, orderKey(w.id), 0, w.stale).Err()
	}
	if lost != nil {
		t.Fatal(lost)
	}
	return w
}

// apply applies two (from, when not nil) with faults f.
func (w *wentBack) apply(f Faults, from *config.Config) (topology.Report, error) {
	opts := ApplyOptions{To: w.two, From: from, Wait: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)}
	if f != nil {
		opts.Faults = f
	}
	return ApplyTopology(w.e.ctx, opts)
}

// forward applies two again, from three (configured: n3 can give its
// marked copies back), with faults f: n2 is brought forward.
func (w *wentBack) forward(f Faults) (topology.Report, error) { return w.apply(f, w.three) }

// n3Back sends n3 back to its copy from before the removal: epoch 1, the
// order's record live there, reserved.
func (w *wentBack) n3Back(t *testing.T) {
	n3 := w.e.clients["n3"]
	w.old3.restore(t, n3)
	if err := n3.RestoreReplace(w.e.ctx, orderKey(w.id), 0, w.stale).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestPutBackMemoryOfAnEarlierApplyIsVoid: a token is the epoch and the
// topology's fingerprint, so an apply of the same topology after every
// node went back below its epoch runs at the same token, as another
// attempt. The forward puts st back on n2 (the put back remembered
// there) and dies at crash point "reinstall"; then n1 and n3 go back to
// their copies from before the removal, so every node is at epoch 1
// (three), stable, and st, homed on n3 there, is cancelled
// (acknowledged). Applying two again runs at the same token: its
// retirement before the first bump must mark n2's record of st (stale:
// away from its home in three) so step 3 installs the cancelled record,
// whatever the earlier attempt's memory says. In "resume" that apply
// dies after bumping n1, n2's record of st goes back to the one put back
// (the memory still there), and the rerun, whose retirement sees the
// apply begun, must retire it again. Reviews found both: st kept
// reserved by the memory, its Cancel lost, and a Confirm then taking
// units already given back; a memory named by the token alone, then by
// the token once the apply at it had begun, let them through.
func TestPutBackMemoryOfAnEarlierApplyIsVoid(t *testing.T) {
	t.Parallel() // its own nodes
	t.Run("fresh", func(t *testing.T) { earlierAttemptMemory(t, false) })
	t.Run("resume", func(t *testing.T) { earlierAttemptMemory(t, true) })
}

// earlierAttemptMemory is TestPutBackMemoryOfAnEarlierApplyIsVoid's
// scenario; resume has the second apply die after its first bump.
func earlierAttemptMemory(t *testing.T, resume bool) {
	w := n2WentBack(t, false)
	ctx, id, n1, n2 := w.e.ctx, w.id, w.e.clients["n1"], w.e.clients["n2"]
	if _, err := w.forward(crashAtPoint("reinstall")); !errors.Is(err, ErrCrashed) {
		t.Fatalf("the forward crashed at reinstall = %v, want ErrCrashed", err)
	}
	if keys := n2.Keys(ctx, xferMarkerKeyPrefix+"*|putback|"+orderKey(id)).Val(); len(keys) != 1 {
		t.Fatalf("the put back's memory on n2: %v, want one key", keys)
	}
	putBack, err := n2.Dump(ctx, orderKey(id)).Result()
	if err != nil {
		t.Fatal(err)
	}
	w.old1.restore(t, n1)
	w.n3Back(t)
	if out, err := openInv(t, w.three, Options{}).Cancel(ctx, id); err != nil || out.Status != StatusCancelled {
		t.Fatalf("Cancel at epoch 1 = %+v, %v", out, err)
	}
	if resume {
		if _, err := w.apply(crashAtPoint("bump"), w.three); !errors.Is(err, ErrCrashed) {
			t.Fatalf("applying two again, crashed at bump = %v, want ErrCrashed", err)
		}
		if err := n2.RestoreReplace(ctx, orderKey(id), 0, putBack).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := w.apply(nil, w.three)
	if err != nil || rep.ToEpoch != 2 || rep.Retired != 1 || rep.OrdersMoved != 1 {
		t.Fatalf("applying two again = %+v, %v; want epoch 2, n2's record of %s retired, 1 order moved", rep, err, id)
	}
	if f := orderFieldsOn(t, ctx, n2, id); f["status"] != string(OrderCancelled) || f["moved"] != "" {
		t.Fatalf("order %s on n2, its home: %v; want the cancelled record, live", id, f)
	}
	if _, err := openInv(t, w.two, Options{}).Confirm(ctx, id); !errors.Is(err, ErrCancelled) {
		t.Fatalf("Confirm %s after the re-apply = %v, want ErrCancelled", id, err)
	}
}
