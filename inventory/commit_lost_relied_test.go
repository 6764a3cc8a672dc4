package inventory

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// heldTakeReply is the Faults of an instance whose general-path attempt
// of one order is slow between its takes and its commit (a pause, a slow
// link): every "reserve" call of order lands on its node at once, and its
// reply is held back until release is closed; taken is closed once the
// first such call has landed. The commit, sent right after, runs on the
// node once release is closed.
type heldTakeReply struct {
	order   string
	release chan struct{}
	taken   chan struct{}
	once    sync.Once
}

func (h *heldTakeReply) Call(ctx context.Context, c ScriptCall, send func() (any, error)) (any, error) {
	if c.Script != "reserve" || callOrder(c) != h.order {
		return send()
	}
	v, err := send()
	h.once.Do(func() { close(h.taken) })
	<-h.release // the reply is late, not the call: the take has landed
	return v, err
}

func (h *heldTakeReply) Crash(context.Context, string) bool { return false }

// A general-path attempt A1 whose commit meets a Cancel's tombstone
// answers ErrCancelled ("cancelled while it was being reserved") and
// gives its parts back: a refusal for good behind that record, as a
// Reserve's begin answered by it is (TestReserveAnsweredCancelledKeeps
// LateStageOut). An attempt R0 of the same order whose take landed and
// whose stage was sent before that answer, landing within the retention
// of it (staged.go, "The one assumption"), must meet the record. The
// commit op's lost branch answered by the record without relied_on: the
// tombstone expired on the Cancel's clock, R0's stage landed on the empty
// key, R0 answered success and Confirm confirmed the order A1 had
// answered cancelled (and a Cancel had been acknowledged for).
func TestGeneralCommitAnsweredCancelledKeepsLateStageOut(t *testing.T) {
	t.Parallel() // it mostly waits a retention out
	c := newLateStageCase(t, 4)
	e, items, x := c.e, c.items, c.x
	home, err := e.inv.homeFor(e.ctx, x)
	if err != nil {
		t.Fatal(err)
	}

	// A1: begin (reserving), its take lands on n2, its reply is held.
	h := &heldTakeReply{order: x, release: make(chan struct{}), taken: make(chan struct{})}
	a1 := e.faultyInstance(h)
	a1done := make(chan error, 1)
	var a1at time.Time
	go func() {
		_, err := a1.reserveGeneral(e.ctx, home, x, items, "", time.Second, "")
		a1at = time.Now()
		a1done <- err
	}()
	e.wait(h.taken, "A1's take")

	// A Cancel tombstones the order under A1.
	if out, err := e.inv.Cancel(e.ctx, x); err != nil || out.Status != StatusCancelled {
		t.Fatalf("Cancel %s while A1 reserves = %+v, %v; want cancelled", x, out, err)
	}
	t.Logf("the Cancel's tombstone has %v left", c.ttl())

	// The tombstone ages: A1 answers when it has less than the retention
	// less a second and a bit left, so a stage landing a second before
	// the retention counted from A1's answer finds it expired unless the
	// answer renewed it.
	c.waitTTLUnder(lateRetention - time.Second - 300*time.Millisecond)
	r0 := e.startHeld(x, items, "", 2*time.Second)
	close(h.release)
	var aerr error
	select {
	case aerr = <-a1done:
	case <-time.After(10 * time.Second):
		t.Fatal("A1 did not answer")
	}
	t.Logf("A1 answered %v; X's record has %v left", aerr, c.ttl())
	if !errors.Is(aerr, ErrCancelled) {
		t.Fatalf("A1 = %v, want ErrCancelled (its commit met the Cancel's tombstone)", aerr)
	}
	lerr := c.landBefore(t, r0, a1at)
	_, cerr := e.inv.Confirm(e.ctx, x)
	t.Logf("R0 answered %v; Confirm answered %v; parts %v", lerr, cerr, e.partsOf(x))
	if lerr == nil || cerr == nil {
		t.Errorf("order %s: Cancel acknowledged and A1 answered ErrCancelled, then R0 answered %v and Confirm %v: the order cancelled ended reserved", x, lerr, cerr)
	}
	for id, st := range e.partsOf(x) {
		if st == "confirmed" {
			t.Errorf("part %s of %s, cancelled, ended confirmed", id, x)
		}
	}
}

// A Cancel answered by a confirmed record (ErrConfirmed) relies on it as
// a Confirm answered by it does (TestConfirmAnsweredByAConfirmedRecord
// KeepsLateStageOut): a late stage of another attempt R0 of the order,
// sent before that answer and landing within the retention of it, must
// meet the record. Without relied_on the record expires on the Confirm's
// clock, R0's stage lands on the empty key, R0 answers success with new
// receipts and a Confirm confirms them: the order of 2 units is confirmed
// twice.
func TestCancelAnsweredConfirmedKeepsLateStageOut(t *testing.T) {
	t.Parallel() // it mostly waits a retention out
	c := newLateStageCase(t, 6)
	e, items, x := c.e, c.items, c.x
	if _, err := e.inv.Reserve(e.ctx, x, items, "", time.Second); err != nil {
		t.Fatal(err)
	}
	if out, err := e.inv.Confirm(e.ctx, x); err != nil || out.Status != StatusConfirmed {
		t.Fatalf("Confirm %s = %+v, %v", x, out, err)
	}
	c.waitTTLUnder(time.Second)
	r0 := e.startHeld(x, items, "", 2*time.Second)
	if _, err := e.inv.Cancel(e.ctx, x); !errors.Is(err, ErrConfirmed) {
		t.Fatalf("Cancel %s after its Confirm = %v, want ErrConfirmed", x, err)
	}
	answeredAt := time.Now()
	t.Logf("Cancel answered ErrConfirmed; X's record has %v left", c.ttl())
	lerr := c.landBefore(t, r0, answeredAt)
	_, cerr := e.inv.Confirm(e.ctx, x)
	parts := e.partsOf(x)
	lvl, err := e.inv.GetStock(e.ctx, "b", "t")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("R0 answered %v; Confirm answered %v; parts %v; b/t confirmed %d", lerr, cerr, parts, lvl.Confirmed)
	if lvl.Confirmed > 2 {
		t.Errorf("order %s of 2 units: %d units confirmed (parts now %v): a Cancel answered it confirmed, then a concurrent attempt took more and a Confirm confirmed them", x, lvl.Confirmed, parts)
	}
}
