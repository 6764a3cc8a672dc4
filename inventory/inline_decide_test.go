package inventory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// partStateOn returns the state part_get reads for part id on e's node
// ("" when it reads none), and whether the part has a record of its own.
func (e *groupEnv) partStateOn(t *testing.T, id string) (state string, record bool) {
	t.Helper()
	v, err := e.inv.run(e.ctx, e.n, partGetScript, []string{partKey(id)})
	if err != nil {
		t.Fatalf("part_get %s: %v", id, err)
	}
	for _, s := range v.([]any) {
		if f := s.(string); len(f) > 6 && f[:6] == "state=" {
			state = f[6:]
		}
	}
	return state, e.admin.Exists(e.ctx, partKey(id)).Val() == 1
}

// stockOn returns the SKU's counters on e's node: available, reserved,
// confirmed.
func (e *groupEnv) stockOn(t *testing.T, route, sku string) [3]string {
	t.Helper()
	v, err := e.admin.HMGet(e.ctx, stockKey(route, sku), "available", "reserved", "confirmed").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out [3]string
	for i, x := range v {
		out[i] = fmt.Sprint(x)
	}
	return out
}

// reserveInline reserves a 1-item order of a/s on e's node by the local
// path (its part inline) and returns the part id.
func (e *groupEnv) reserveInline(t *testing.T, inv *Inventory, id string, qty int64) string {
	t.Helper()
	if _, err := inv.Reserve(e.ctx, id, []Item{{Route: "a", SKU: "s", Quantity: qty}}, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	pid := stockPartID(id, orderFieldsOn(t, e.ctx, e.admin, id)["token"], 0)
	if st, rec := e.partStateOn(t, pid); st != "pending" || rec {
		t.Fatalf("order %s: part %s reads %q (a record of its own: %v), want pending inline", id, pid, st, rec)
	}
	return pid
}

// A Confirm or Cancel of an order reserved whole on its home (its parts
// inline: inline.go) is one script: the decision settles the parts with
// the record, atomically, and the Confirm sends no settle. Each part
// settles once: its units move once, its pending-index entry and its
// settled-log entry are the decision's, and a Confirm retried finds it
// settled.
func TestDecisionSettlesInlineParts(t *testing.T) {
	e := newGroupEnv(t, 32)
	if _, err := e.inv.LoadStock(e.ctx, "a", "s", 100, 0); err != nil {
		t.Fatal(err)
	}
	// a first call of a script loads it on the node, which the counts
	// would see: a Confirm and its retry load the decision and the settle
	e.reserveInline(t, e.inv, "dc-0", 1)
	for range 2 {
		if _, err := e.inv.Confirm(e.ctx, "dc-0"); err != nil {
			t.Fatal(err)
		}
	}
	p1 := e.reserveInline(t, e.inv, "dc-1", 2)
	p2 := e.reserveInline(t, e.inv, "dc-2", 3)
	e.sent.of(orderDecideScript)
	e.sent.of(settleScript)
	out, err := e.inv.Confirm(e.ctx, "dc-1")
	if err != nil || out.Status != StatusConfirmed || out.PendingParts != 0 {
		t.Fatalf("Confirm dc-1: %+v, %v", out, err)
	}
	if d, s := e.sent.of(orderDecideScript), e.sent.of(settleScript); d != 1 || s != 0 {
		t.Errorf("Confirm sent %d decision and %d settle scripts, want 1 and 0", d, s)
	}
	if st, rec := e.partStateOn(t, p1); st != "confirmed" || !rec {
		t.Errorf("part %s reads %q (a record: %v) after its Confirm, want a confirmed record", p1, st, rec)
	}
	if got, want := e.stockOn(t, "a", "s"), [3]string{"94", "3", "3"}; got != want {
		t.Errorf("stock (available, reserved, confirmed) %v after the Confirm, want %v", got, want)
	}
	if n := e.admin.ZCard(e.ctx, "inv:pending").Val(); n != 1 {
		t.Errorf("%d pending-index entries, want dc-2's alone", n)
	}
	if log := e.admin.XRange(e.ctx, SettledLogKey, "-", "+").Val(); len(log) != 2 || log[1].Values["p"] != p1 {
		t.Errorf("settled log %v, want dc-0's part's entry, then one naming %s", log, p1)
	}

	// a retry: the decided record answers, the settle finds the part settled
	if out, err := e.inv.Confirm(e.ctx, "dc-1"); err != nil || out.Status != StatusConfirmed || out.PendingParts != 0 {
		t.Fatalf("Confirm dc-1 again: %+v, %v", out, err)
	}
	if d, s := e.sent.of(orderDecideScript), e.sent.of(settleScript); d != 1 || s != 1 {
		t.Errorf("the retried Confirm sent %d decision and %d settle scripts, want 1 and 1", d, s)
	}
	if out, err := e.inv.Cancel(e.ctx, "dc-2"); err != nil || out.Status != StatusCancelled || out.PendingParts != 0 {
		t.Fatalf("Cancel dc-2: %+v, %v", out, err)
	}
	if d, s := e.sent.of(orderDecideScript), e.sent.of(settleScript); d != 1 || s != 0 {
		t.Errorf("Cancel sent %d decision and %d settle scripts, want 1 and 0", d, s)
	}
	if st, _ := e.partStateOn(t, p2); st != "cancelled" {
		t.Errorf("part %s reads %q after its Cancel, want cancelled", p2, st)
	}
	if got, want := e.stockOn(t, "a", "s"), [3]string{"97", "0", "3"}; got != want {
		t.Errorf("stock %v after both decisions and a retry, want %v", got, want)
	}
	if n := e.admin.ZCard(e.ctx, "inv:pending").Val(); n != 0 {
		t.Errorf("%d pending-index entries, want none", n)
	}
	if n := e.admin.XLen(e.ctx, SettledLogKey).Val(); n != 3 {
		t.Errorf("settled log holds %d entries, want 3 (one per part)", n)
	}
}

// A counter that settle.lua would refuse (fewer units reserved than the
// part holds) makes the decision write the part pending, as before: the
// settle that follows refuses it and nothing moves, and the Confirm counts
// the part as not settled yet.
func TestDecisionLeavesARefusedInlinePartPending(t *testing.T) {
	e := newGroupEnv(t, 32)
	if _, err := e.inv.LoadStock(e.ctx, "a", "s", 100, 0); err != nil {
		t.Fatal(err)
	}
	p := e.reserveInline(t, e.inv, "dr-1", 2)
	if err := e.admin.HSet(e.ctx, stockKey("a", "s"), "reserved", "1").Err(); err != nil {
		t.Fatal(err)
	}
	out, err := e.inv.Confirm(e.ctx, "dr-1")
	if err != nil || out.Status != StatusConfirmed || out.PendingParts != 1 {
		t.Fatalf("Confirm dr-1: %+v, %v; want confirmed with its part not settled", out, err)
	}
	if st, rec := e.partStateOn(t, p); st != "pending" || !rec {
		t.Errorf("part %s reads %q (a record: %v), want a pending record", p, st, rec)
	}
	if got, want := e.stockOn(t, "a", "s"), [3]string{"98", "1", "<nil>"}; got != want {
		t.Errorf("stock %v, want %v (nothing moved)", got, want)
	}
}

// lostReplies makes the node's reply to the first n calls of a script
// be lost after the call ran (Faults: the outcome unknown to the caller).
type lostReplies struct {
	script string
	n      atomic.Int32
}

// lostOrderReplies is a node with 100 units of SKU s on route a and an
// inventory over it whose order script replies f loses (none until f.n is
// set), beside e's own.
func lostOrderReplies(t *testing.T) (*groupEnv, *Inventory, *lostReplies) {
	t.Helper()
	e := newGroupEnv(t, 32)
	if _, err := e.inv.LoadStock(e.ctx, "a", "s", 100, 0); err != nil {
		t.Fatal(err)
	}
	f := &lostReplies{script: "order"}
	inv, err := New(e.inv.r, Options{Logger: slog.New(slog.DiscardHandler), Faults: f})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inv.Close)
	return e, inv, f
}

func (f *lostReplies) Call(_ context.Context, c ScriptCall, send func() (any, error)) (any, error) {
	v, err := send()
	if c.Script == f.script && f.n.Add(-1) >= 0 {
		return nil, fmt.Errorf("%w: the reply of %s was lost", ErrCrashed, c.Script)
	}
	return v, err
}

func (f *lostReplies) Crash(context.Context, string) bool { return false }

// The crash point of the decision that settles: its reply is lost (the
// caller crashed, or the network cut, after the script ran). The Confirm
// fails with the outcome unknown; its retry reads the decided record and
// settles what the decision settled already: found settled, nothing moves
// twice.
func TestDecisionSettleReplyLost(t *testing.T) {
	e, inv, f := lostOrderReplies(t)
	for _, op := range []string{"confirm", "cancel"} {
		id := "dl-" + op
		p := e.reserveInline(t, inv, id, 2)
		before := e.stockOn(t, "a", "s")
		f.n.Store(1)
		decide, want := inv.Confirm, "confirmed"
		if op == "cancel" {
			decide, want = inv.Cancel, "cancelled"
		}
		if _, err := decide(e.ctx, id); !errors.Is(err, ErrCrashed) {
			t.Fatalf("%s %s with its reply lost: %v, want ErrCrashed", op, id, err)
		}
		if st, rec := e.partStateOn(t, p); st != want || !rec {
			t.Errorf("part %s reads %q (a record: %v) after the lost reply, want %s: the decision settled it", p, st, rec, want)
		}
		after := e.stockOn(t, "a", "s")
		if out, err := decide(e.ctx, id); err != nil || out.PendingParts != 0 {
			t.Fatalf("%s %s retried: %+v, %v", op, id, out, err)
		}
		if got := e.stockOn(t, "a", "s"); got != after {
			t.Errorf("%s retried moved the stock again: %v → %v (before the decision %v)", op, after, got, before)
		}
	}
	if got, want := e.stockOn(t, "a", "s"), [3]string{"98", "0", "2"}; got != want {
		t.Errorf("stock %v, want %v", got, want)
	}
}

// The reconciler's expiry of a due inline part settles that part with
// the order's decision, in one script, and writes the order's other
// inline parts pending: each of those is settled, and counted, by the
// pass that finds it due. Every part is cancelled once and every unit
// comes back.
func TestExpirySettlesTheDueInlinePart(t *testing.T) {
	t.Parallel() // sleeps past the parts' deadlines on nodes of its own
	e := newGroupEnv(t, 32)
	for _, sku := range []string{"s", "t"} {
		if _, err := e.inv.LoadStock(e.ctx, "a", sku, 100, 0); err != nil {
			t.Fatal(err)
		}
	}
	e.reserveInline(t, e.inv, "dx-0", 1) // loads the scripts the counts see
	for range 2 {
		if _, err := e.inv.Confirm(e.ctx, "dx-0"); err != nil {
			t.Fatal(err)
		}
	}
	for id, items := range map[string][]Item{
		"dx-1": {{Route: "a", SKU: "s", Quantity: 2}},
		"dx-2": {{Route: "a", SKU: "s", Quantity: 3}, {Route: "a", SKU: "t", Quantity: 4}},
	} {
		if _, err := e.inv.Reserve(e.ctx, id, items, "", time.Second); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2*time.Second + partGrace)
	due, err := e.inv.DueParts(e.ctx, e.n, 10)
	if err != nil || len(due) != 3 {
		t.Fatalf("due parts %+v, %v; want dx-1's and dx-2's 3", due, err)
	}
	e.sent.of(orderDecideScript)
	e.sent.of(settleScript)
	var scripts []string
	for _, p := range due {
		r, err := e.inv.ResolveExpired(e.ctx, p)
		if err != nil || r != Cancelled {
			t.Fatalf("ResolveExpired %s: %v, %v; want cancelled", p.PartID, r, err)
		}
		scripts = append(scripts, fmt.Sprintf("%s: %d+%d", p.PartID[:4], e.sent.of(orderDecideScript), e.sent.of(settleScript)))
	}
	// per part, decision + settle scripts: dx-1's and the first of dx-2's
	// parts settle with their order's decision, the second of dx-2's
	// meets the decided record and is settled by itself
	slices.Sort(scripts)
	if want := []string{"dx-1: 1+0", "dx-2: 1+0", "dx-2: 1+1"}; !slices.Equal(scripts, want) {
		t.Errorf("scripts per due part (decision+settle) %v, want %v", scripts, want)
	}
	// every unit available again but dx-0's confirmed one
	for sku, want := range map[string][3]string{"s": {"99", "0", "1"}, "t": {"100", "0", "<nil>"}} {
		if got := e.stockOn(t, "a", sku); got != want {
			t.Errorf("stock of %s %v after the expiry, want %v", sku, got, want)
		}
	}
	if n := e.admin.ZCard(e.ctx, "inv:pending").Val(); n != 0 {
		t.Errorf("%d pending-index entries, want none", n)
	}
}

// The crash point of an expiry that settles the due part: the decision's
// reply is lost after the script ran. The part is settled with the
// record; the reconciler's retry finds it settled and moves nothing.
func TestExpirySettleReplyLost(t *testing.T) {
	t.Parallel() // sleeps past the parts' deadlines on nodes of its own
	e, inv, f := lostOrderReplies(t)
	if _, err := inv.Reserve(e.ctx, "xl-1", []Item{{Route: "a", SKU: "s", Quantity: 2}}, "", time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2*time.Second + partGrace)
	due, err := inv.DueParts(e.ctx, e.n, 10)
	if err != nil || len(due) != 1 {
		t.Fatalf("due parts %+v, %v; want xl-1's", due, err)
	}
	f.n.Store(1)
	if _, err := inv.ResolveExpired(e.ctx, due[0]); !errors.Is(err, ErrCrashed) {
		t.Fatalf("ResolveExpired with the decision's reply lost: %v, want ErrCrashed", err)
	}
	if st, rec := e.partStateOn(t, due[0].PartID); st != "cancelled" || !rec {
		t.Errorf("part %s reads %q (a record: %v) after the lost reply, want cancelled: the expiry settled it", due[0].PartID, st, rec)
	}
	after := e.stockOn(t, "a", "s")
	if r, err := inv.ResolveExpired(e.ctx, due[0]); err != nil || r != AlreadySettled {
		t.Fatalf("ResolveExpired retried: %v, %v; want already settled", r, err)
	}
	if got, want := e.stockOn(t, "a", "s"), after; got != want || got[0] != "100" || got[1] != "0" {
		t.Errorf("stock %v after the retry, %v before it; want every unit available once", got, want)
	}
}
