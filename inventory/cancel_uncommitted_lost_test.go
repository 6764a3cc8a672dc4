package inventory

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// heldCommit holds back the commit of one order sent by itself (the
// order script's commit op) until release is closed, then sends it: a
// one-round reservation's commit still on its way when the test goes on.
type heldCommit struct {
	order   string
	release chan struct{}
}

func (h *heldCommit) Call(_ context.Context, c ScriptCall, send func() (any, error)) (any, error) {
	if c.Script == orderScript.name && slices.Contains(c.Keys, orderKey(h.order)) && len(c.Args) > 0 && c.Args[0] == string(opCommit) {
		<-h.release
	}
	return send()
}

func (h *heldCommit) Crash(context.Context, string) bool { return false }

// uncommittedLostPart is a two-node order (2 units of a/s on n1, 1 of
// b/s on n2) reserved in one round whose commit has not landed, and the
// id and pending-index member of its part on n1.
type uncommittedLostPart struct {
	inv   *Inventory
	order string
	id, m string
	q     int
	off   int64
}

// A one-round order's record names no part's redo-log place until its
// commit lands (carry.go), so whatever decides it before then (a Cancel,
// the expiry, a retried Reserve, a move, a staged attempt's abort) knows
// its parts by id only. Its part on n1 lost its own record meanwhile
// (deleted, evicted, lost with the node's writes), listed pending by its
// place alone, its units reserved. The Cancel's probe (prevent) and
// settle find no record and no listing by id and write the part's
// tombstone, which still fences a take on its way; but the node lists
// the part, so the tombstone is read as the lost record it stands for
// (pending_index.lua, pend_lost): the redo entry is not read as
// cancelled, part states read it unreadable, a cancel given its place
// answers lost, the expiry sets the part aside with its 2 units reserved
// instead of dropping it as settled, the reconciler's retry leaves it
// there, SettleStuck refuses it, and SettleStuckLost gives the units
// back.
// Before, the redo entry read cancelled with quantity 0 (what pgsync
// lands), the expiry read the tombstone as settled and dropped the part:
// 2 units reserved for good, nothing reported. Two ways into the window:
// the reserving process's commit held back (same process), and the
// reserving process crashed before it sent the commit.
func TestCancelBeforeTheCommitLandsDoesNotStrandALostPartsUnits(t *testing.T) {
	t.Parallel() // its cases have nodes of their own; they mostly wait a deadline out
	for _, how := range []string{"commit held back", "crashed before the commit"} {
		t.Run(strings.ReplaceAll(how, " ", "-"), func(t *testing.T) {
			t.Parallel() // it mostly waits a deadline out
			e := newStagedEnv(t)
			items := []Item{{Route: "a", SKU: "s", Quantity: 2}, {Route: "b", SKU: "s", Quantity: 1}}
			var u uncommittedLostPart
			u.order = "uncommitted-" + strconv.Itoa(len(how))
			if how == "commit held back" {
				h := &heldCommit{order: u.order, release: make(chan struct{})}
				inv, err := New(e.r, Options{Logger: slog.New(slog.DiscardHandler), AttemptLease: stagedLease, Faults: h, CarryWait: -1})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(inv.Close)
				t.Cleanup(func() { close(h.release) }) // before Close, which waits for the commit
				u.inv = inv
				if _, err := inv.Reserve(e.ctx, u.order, items, "", stagedTTL); err != nil {
					t.Fatal(err)
				}
			} else {
				u.inv = e.inv
				point := "staged:before-commit"
				e.faults.point.Store(&point)
				_, err := e.inv.Reserve(e.ctx, u.order, items, "", stagedTTL)
				e.faults.point.Store(nil)
				if !errors.Is(err, errCrashed) {
					t.Fatalf("Reserve stopped before its commit: %v", err)
				}
			}
			if f := orderFieldsOn(t, e.ctx, e.clients[e.homeName(u.order)], u.order); f["status"] == "reserved" {
				t.Fatalf("order record %v; want it not committed yet", f)
			}
			u.find(t, e)
			cl := e.clients["n1"]
			cl.Del(e.ctx, partKey(u.id))

			out, err := u.inv.Cancel(e.ctx, u.order)
			if err != nil || out.Status != StatusCancelled {
				t.Fatalf("Cancel = %+v, %v; want cancelled", out, err)
			}
			// the tombstone is written (the node cannot tell the part from a
			// take still on its way, which it must fence) and read as the
			// lost record it stands for
			if f := partFieldsOn(t, e.ctx, cl, u.id); f["tombstone"] != "1" {
				t.Errorf("record of the part after the cancel %v; want its tombstone", f)
			}
			u.lostUntilSettledByAnOperator(t, e)
		})
	}
}

// homeName is the name of order's home node.
func (e *stagedEnv) homeName(order string) string {
	home, err := e.inv.orderHome(e.inv.topo.cur.Load(), order)
	if err != nil {
		e.t.Fatal(err)
	}
	return home.Name()
}

// find reads the order's one part on n1 from n1's pending index: its
// member, place and id.
func (u *uncommittedLostPart) find(t *testing.T, e *stagedEnv) {
	t.Helper()
	ms, err := e.clients["n1"].ZRange(e.ctx, PendingKey, 0, -1).Result()
	if err != nil || len(ms) != 1 {
		t.Fatalf("n1's pending index %v, %v; want the order's one part", ms, err)
	}
	u.m = ms[0]
	qs, offs, ok := strings.Cut(u.m, ":")
	q, qerr := strconv.Atoi(qs)
	off, oerr := strconv.ParseInt(offs, 10, 64)
	if !ok || qerr != nil || oerr != nil {
		t.Fatalf("member %q is not a redo-log place", u.m)
	}
	u.q, u.off = q, off
	en, err := e.inv.ReadRedoLog(e.ctx, "n1", q, off-1, 1)
	if err != nil || len(en) != 1 || en[0].OrderID != u.order || en[0].Quantity != 2 {
		t.Fatalf("redo entry at %s: %+v, %v; want the order's part of 2 units", u.m, en, err)
	}
	u.id = en[0].PartID
}

// lostUntilSettledByAnOperator checks what a part whose record was lost
// while listed leaves after its order was cancelled: its 2 units reserved
// (the part on n2 given back), its member listed, its redo entry not read
// as settled; once due it is set aside, and SettleStuckLost gives the
// units back.
func (u *uncommittedLostPart) lostUntilSettledByAnOperator(t *testing.T, e *stagedEnv) {
	t.Helper()
	cl := e.clients["n1"]
	reserved := func(route string, want int64, when string) {
		t.Helper()
		if lv, err := e.inv.GetStock(e.ctx, route, "s"); err != nil || lv.Reserved != want {
			t.Errorf("%s: %s/s %+v, %v; want reserved %d", when, route, lv, err, want)
		}
	}
	reserved("a", 2, "after the cancel")
	reserved("b", 0, "after the cancel")
	if _, err := cl.ZScore(e.ctx, PendingKey, u.m).Result(); err != nil {
		t.Errorf("pending member %s after the cancel: %v; want it kept", u.m, err)
	}
	if en, err := e.inv.ReadRedoLog(e.ctx, "n1", u.q, u.off-1, 1); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ReadRedoLog after the cancel = %+v, %v; want ErrCorrupt naming the part, not a settled entry", en, err)
	}
	// a cancel given its place answers lost, as for a record gone
	if got, err := e.inv.SettleNow(e.ctx, Settle{Node: "n1", Action: Cancel, OrderID: u.order, PartIDs: []string{u.id},
		Members: []string{u.m}}); err != nil || !slices.Equal(got, []string{"lost"}) {
		t.Errorf("cancel of the part given its place %s = %v, %v; want lost", u.m, got, err)
	}
	if _, st, err := e.inv.PartStatesAt(e.ctx, "n1", []RedoCursor{{PartID: u.id, Queue: u.q, After: u.off}}); err != nil ||
		len(st) != 1 || st[0].State != PartUnreadable {
		t.Errorf("PartStatesAt after the cancel = %+v, %v; want the part unreadable, its record lost while listed", st, err)
	}

	waitDueListed(t, e.ctx, e.inv, "n1", u.id) // the deadline and the part's grace
	n1, _ := e.r.Node("n1")
	due, err := e.inv.DueParts(e.ctx, n1, 100)
	if err != nil || len(due) != 1 || due[0].PartID != u.id || due[0].Problem == "" {
		t.Fatalf("due %+v, %v; want part %s listed with its record lost", due, err, u.id)
	}
	_, rerr := e.inv.ResolveExpired(e.ctx, due[0])
	if !Unsettleable(rerr) {
		t.Fatalf("ResolveExpired(%+v) = %v; want an Unsettleable error", due[0], rerr)
	}
	const retryIn = 5 * time.Millisecond // its retry times, first and most
	if _, err := e.inv.SetAside(e.ctx, due[0], rerr.Error(), retryIn, retryIn); err != nil {
		t.Fatal(err)
	}
	if stuck, err := e.inv.StuckParts(e.ctx, "n1", 10); err != nil || len(stuck) != 1 || stuck[0].PartID != u.id {
		t.Fatalf("stuck parts %+v, %v; want part %s set aside", stuck, err, u.id)
	}
	if n, _ := cl.ZCard(e.ctx, PendingKey).Result(); n != 0 {
		t.Errorf("pending index holds %d members once the part is set aside; want none", n)
	}
	// its retry time come, the reconciler's retry leaves it set aside:
	// moved back, it would only be set aside again
	time.Sleep(10 * retryIn)
	if moved, err := e.inv.RetryDueStuck(e.ctx, "n1", 10, time.Hour); err != nil || moved != 0 {
		t.Errorf("RetryDueStuck = %d, %v; want the part left set aside, its record lost", moved, err)
	}
	if _, err := e.inv.SettleStuck(e.ctx, "n1", u.id, Cancel); !errors.Is(err, ErrPrecondition) {
		t.Errorf("SettleStuck without the part's values = %v; want ErrPrecondition, its record lost", err)
	}
	reserved("a", 2, "set aside")
	got, err := e.inv.SettleStuckLost(e.ctx, "n1", u.id, Cancel, StuckUnits{Route: "a", SKU: "s", Quantity: 2})
	if err != nil || got != settleDone {
		t.Fatalf("SettleStuckLost = %q, %v; want done", got, err)
	}
	reserved("a", 0, "after SettleStuckLost")
	if en, err := e.inv.ReadRedoLog(e.ctx, "n1", u.q, u.off-1, 1); err != nil || len(en) != 1 || en[0].State != "cancelled" ||
		en[0].Quantity != 2 {
		t.Errorf("redo entry after SettleStuckLost %+v, %v; want cancelled, 2 units", en, err)
	}
}
